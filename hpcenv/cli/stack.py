"""``hpcenv resolve | render | build``: from site + recipe to a lock, recipes, and images."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hpcenv.choices import BuildFormat, SifSource, TransportKind
from hpcenv.cli.options import (
    JsonOpt,
    OptionalRecipeOpt,
    OptionalSiteOpt,
    PipOpt,
    RequirementsOpt,
    SetOpt,
    complete_recipe,
    need,
    project_values,
)

if TYPE_CHECKING:
    from hpcenv.build import BuildPlan
    from hpcenv.jobs.service import SshOptions
    from hpcenv.lock import Lock
    from hpcenv.recipe import Recipe
    from hpcenv.site import Site


def _lock(
    site_name: str,
    recipe: str,
    sets: list[str] | None,
    requirements: list[Path] | None = None,
    pip: list[str] | None = None,
) -> tuple[Site, Lock, Recipe]:
    from hpcenv.recipe import load_recipe, with_additions
    from hpcenv.resolver import parse_overrides, resolve
    from hpcenv.site import load_site

    site = load_site(site_name)
    loaded = with_additions(load_recipe(recipe), requirements or [], pip or [])
    return site, resolve(site, loaded, parse_overrides(sets or [])), loaded


ARTIFACTS = ("docker", "singularity", "job", "lock")


def build_context_needs(fmt: str, text: str) -> list[str]:
    """What a printed Dockerfile (``COPY`` without ``--from``) or Singularity definition (the
    plain ``%files`` section) takes from the folder it is built in; [] for the job and lock."""
    needs: list[str] = []
    section = ""
    for line in text.splitlines():
        words = line.split()
        if fmt == "docker" and words[:1] == ["COPY"]:
            sources = [w for w in words[1:-1] if not w.startswith("--")]
            if not any(w.startswith("--from") for w in words):
                needs += sources
        elif fmt == "singularity":
            if line.startswith("%"):
                section = line.strip()
            elif section == "%files" and words:
                needs.append(words[0])
    return list(dict.fromkeys(needs))


def register(app: typer.Typer) -> None:
    @app.command("resolve")
    def resolve_cmd(
        ctx: typer.Context,
        site: OptionalSiteOpt = None,
        recipe: OptionalRecipeOpt = None,
        set_: SetOpt = None,
        requirements: RequirementsOpt = None,
        pip: PipOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Resolve a matched stack and print the lock (each version and the reason for it)."""
        got = project_values(
            ctx, {"site": site, "recipe": recipe, "requirements": requirements, "pip": pip}
        )
        _, lock, _ = _lock(
            need(got, "site"), need(got, "recipe"), set_, got["requirements"], got["pip"]
        )
        if as_json:
            typer.echo(lock.to_json(), nl=False)
            return
        from rich.table import Table

        table = Table(
            "component", "version", "from", "reason", title=f"{lock.recipe} on {lock.site}"
        )
        for name, c in lock.components.items():
            ver = f"{c.implementation}@{c.version}" if c.implementation else c.version
            table.add_row(name, ver, c.source, c.reason)
        for name, why in lock.excluded.items():
            table.add_row(name, "-", "excluded", why)
        for spec in lock.user_content.get("pip", []):
            table.add_row("(user)", spec, "pip", "the recipe's user content (constrained)")
        from hpcenv.cli.console import console

        console().print(table)

    @app.command("render")
    def render_cmd(
        ctx: typer.Context,
        site: OptionalSiteOpt = None,
        recipe: OptionalRecipeOpt = None,
        set_: SetOpt = None,
        requirements: RequirementsOpt = None,
        pip: PipOpt = None,
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="output folder [default: out]")
        ] = None,
        force: Annotated[
            bool,
            typer.Option("--force", help="replace a non-empty folder hpcenv did not create"),
        ] = False,
        account: Annotated[
            str | None,
            typer.Option("--account", "-A", help="project for job.sh (else set HPCENV_PROJECT)"),
        ] = None,
        fmt: Annotated[
            str | None,
            typer.Option(
                "--format",
                "-f",
                help="print one artifact to stdout instead of writing --out: "
                + ", ".join(ARTIFACTS)
                + " (e.g. --format singularity > Singularity.def)",
            ),
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Write Dockerfile, Singularity.def, stack.lock.json and a job script (job.sh) to --out.

        The folder is replaced whole (written beside it, then swapped in); a non-empty folder
        that hpcenv did not make is refused unless --force. pip.conf is not written here.
        With --format, one artifact goes to stdout and nothing is written.
        """
        from hpcenv.errors import ConfigError
        from hpcenv.jobs.render import render_job
        from hpcenv.jobs.runtimes.registry import default_image
        from hpcenv.jobs.spec import JobSpec
        from hpcenv.output import check_target, publish_dir
        from hpcenv.render import render, stage_user_files, write

        if fmt is not None and fmt not in ARTIFACTS:
            from hpcenv.errors import did_you_mean

            raise ConfigError(
                f"--format {fmt!r}{did_you_mean(fmt, ARTIFACTS)}: one of {', '.join(ARTIFACTS)}"
            )
        if fmt is not None and out is not None:
            raise ConfigError(
                f"--format {fmt} prints one artifact to stdout and --out writes them all to a "
                "folder: give one of them"
            )
        got = project_values(
            ctx,
            {
                "site": site,
                "recipe": recipe,
                "requirements": requirements,
                "pip": pip,
                "account": account,
            },
        )
        account = got.get("account")
        out = out or Path("out")
        if fmt is None:
            check_target(out, force=force)  # before the slower resolve
        site_obj, lock, loaded = _lock(
            need(got, "site"), need(got, "recipe"), set_, got["requirements"], got["pip"]
        )
        rendered = render(lock, site_obj)
        # A ready job script: the image's MPI allreduce check, launched the site's way.
        check = ["python3", "/opt/hpcenv/checks/allreduce_mpi.py", "--max-bytes", "1048576"]
        try:
            job = JobSpec(
                name=f"hpcenv-{lock.recipe}", command=check, recipe=lock.recipe, account=account
            )
        except ValueError:
            raise ConfigError(
                f"--account {account!r}: letters, digits and _.,:@%+=/- only"
            ) from None
        if account:
            from hpcenv.jobs.project import account_for

            account_for(site_obj, account, strict=True)  # a placeholder is refused here too
        from hpcenv.jobs.measured import for_job

        image = default_image(site_obj, lock.recipe)
        measured, warning = for_job(site_obj, job, image)
        if warning:
            typer.echo(f"warning: {warning}", err=True)
        job_sh = render_job(site_obj, job, image, measured)
        if fmt is not None:  # one artifact on stdout (the hpccm habit: -f singularity > x.def)
            import sys

            artifacts = {
                "docker": rendered.dockerfile,
                "singularity": rendered.singularity,
                "job": job_sh,
                "lock": rendered.lock_json,
            }
            sys.stdout.write(artifacts[fmt])
            needs = build_context_needs(fmt, artifacts[fmt])
            if needs:
                typer.echo(
                    f"note: this {fmt} recipe copies {', '.join(needs)} from its build context: "
                    f"`hpcenv render -s {site_obj.name} -r {lock.recipe} --out DIR` writes them "
                    "beside it (or `hpcenv build` builds it)",
                    err=True,
                )
            return

        def write_all(tmp: Path) -> list[str]:
            paths = write(rendered, tmp, build_inputs=False)
            hosts = [f.host for f in loaded.content.files]
            paths += stage_user_files(lock, hosts, tmp)
            (tmp / "job.sh").write_text(job_sh, encoding="utf-8")
            return [p.relative_to(tmp).as_posix() for p in [*paths, tmp / "job.sh"]]

        written = [str(out / rel) for rel in publish_dir(out, write_all, force=force)]
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "out": str(out),
                        "files": written,
                        "site": site_obj.name,
                        "recipe": lock.recipe,
                    },
                    indent=2,
                )
            )
            return
        for path in written:
            typer.echo(path)

    @app.command("build")
    def build_cmd(
        ctx: typer.Context,
        site: OptionalSiteOpt = None,
        recipe: Annotated[
            list[str] | None,
            typer.Option(
                "--recipe",
                "-r",
                help="default: the site's recipes; a name or a recipe file",
                autocompletion=complete_recipe,
            ),
        ] = None,
        set_: SetOpt = None,
        requirements: RequirementsOpt = None,
        pip: PipOpt = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="render and print the plan only")
        ] = False,
        engine: Annotated[
            str | None, typer.Option("--engine", help="podman (default), docker, buildah")
        ] = None,
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="build contexts folder")
        ] = None,
        fmt_opt: Annotated[
            BuildFormat | None,
            typer.Option(
                "--format",
                help="oci, sif or both (default: sif where the site runs apptainer/singularity)",
            ),
        ] = None,
        sif_from: Annotated[
            SifSource,
            typer.Option(
                "--sif-from",
                help="oci: convert the built image; def: build Singularity.def natively",
            ),
        ] = SifSource.oci,
        push: Annotated[
            str | None,
            typer.Option(
                "--push", help="also push the image to REGISTRY/NAME:TAG (sites that pull)"
            ),
        ] = None,
        account: Annotated[
            str | None,
            typer.Option(
                "--account", "-A", help="project in the site's image path ($HPCENV_PROJECT)"
            ),
        ] = None,
        on_login: Annotated[
            bool,
            typer.Option(
                "--on-login",
                help="build on the site's login node over SSH with the site's own builder",
            ),
        ] = False,
        transport: Annotated[
            TransportKind,
            typer.Option("--transport", help="with --on-login: ssh (default) or local"),
        ] = TransportKind.ssh,
        ssh_host: Annotated[str | None, typer.Option("--ssh-host")] = None,
        ssh_port: Annotated[int | None, typer.Option("--ssh-port", min=1, max=65535)] = None,
        ssh_user: Annotated[str | None, typer.Option("--ssh-user")] = None,
        ssh_key: Annotated[str | None, typer.Option("--ssh-key")] = None,
        known_hosts: Annotated[str | None, typer.Option("--known-hosts")] = None,
        no_site_mpi: Annotated[
            bool,
            typer.Option(
                "--no-site-mpi",
                help="site-build: do not mount the host MPI (control: the build stops at its "
                "MPI check)",
            ),
        ] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Resolve, render, build and deliver the site's images to where its jobs look for them."""
        from hpcenv.build import build_image, make_plans
        from hpcenv.delivery import deliver, delivery_env, plan_delivery
        from hpcenv.jobs.runtimes.registry import runtime_of
        from hpcenv.resolver import parse_overrides
        from hpcenv.site import load_site, retirement_warning

        got = project_values(
            ctx,
            {
                "site": site,
                "recipe": recipe,
                "requirements": requirements,
                "pip": pip,
                "account": account,
            },
        )
        site_obj = load_site(need(got, "site"))
        file_recipe = got.get("recipe")
        recipe = [file_recipe] if isinstance(file_recipe, str) else file_recipe
        requirements, pip, account = got["requirements"], got["pip"], got.get("account")
        retired = retirement_warning(site_obj)
        if retired:
            typer.echo(retired, err=True)
        runtime = runtime_of(site_obj)
        fmt: str = fmt_opt.value if fmt_opt is not None else runtime.default_format()
        if account:
            from hpcenv.jobs.project import account_for

            account_for(site_obj, account, strict=True)  # a placeholder is refused here too
        plans = make_plans(
            site_obj, recipe, parse_overrides(set_ or []), out, requirements=requirements, pip=pip
        )
        env = delivery_env(site_obj, account)
        engine_name = engine or runtime.build_engine(site_obj)
        deliveries = {
            p.recipe: plan_delivery(site_obj, p.recipe, p.tag, fmt, push, engine_name)
            for p in plans
        }
        if on_login:
            from hpcenv.jobs.service import SshOptions

            _on_login(
                site_obj,
                plans,
                fmt,
                engine,
                transport,
                SshOptions(ssh_host, ssh_port, ssh_user, ssh_key, known_hosts),
                dry_run=dry_run,
                as_json=as_json,
                push=push,
            )
            return
        if dry_run:
            summaries = [
                p.summary(engine_name, fmt if sif_from == "oci" else "oci")
                | {"delivery": [s.describe() for s in deliveries[p.recipe]]}
                | {"image": deliveries[p.recipe][-1].target}  # what the delivery makes
                for p in plans
            ]
            if as_json:
                typer.echo(json.dumps(summaries, indent=2))
                return
            for s in summaries:
                typer.echo(f"plan: {s['recipe']} for {s['site']} -> {s['tag']} ({s['platform']})")
                typer.echo(f"  base: {s['base_image']}\n  context: {s['context']}")
                if "build_host" in s:  # site-build: on the site's login node, natively
                    typer.echo(f"  build on: {s['build_host']}")
                else:
                    typer.echo(f"  builds: {s['builds']}")
                if "storage" in s:
                    typer.echo(
                        f"  build storage: {s['storage']} (the engine's layers, on the build "
                        "host's node-local disk: podman's graphroot in "
                        "~/.config/containers/storage.conf)"
                    )
                typer.echo(f"  build: {s['build_command']}")
                for step in s.get("sif", []):  # type: ignore[attr-defined]
                    typer.echo(f"  sif: {step}")
                for name, ver in s["components"].items():  # type: ignore[attr-defined]
                    typer.echo(f"  {name:<10} {ver}")
                for name in s["excluded"]:  # type: ignore[attr-defined]
                    typer.echo(f"  {name:<10} excluded (see stack.lock.json)")
                for step in s["delivery"]:  # type: ignore[attr-defined]
                    typer.echo(f"  deliver: {step}")
                typer.echo(f"  job runs: {s['image']}")
            return
        from rich.console import Console

        from hpcenv.build import build_lock, build_log_path, build_platform
        from hpcenv.cli.progress import StepProgress

        if fmt != "sif" or sif_from == "oci":
            for plan in plans:  # a host that cannot run the target's binaries: before any output
                build_platform(plan)

        console = Console(stderr=True)
        results = []
        for plan in plans:
            console.print(f"[bold]build[/] {plan.recipe} for {plan.site.name} -> {plan.tag}")
            entry: dict[str, object] = {"recipe": plan.recipe}

            def waiting(lock: Path, plan: BuildPlan = plan) -> None:
                console.print(
                    f"  waiting for another hpcenv build of {plan.recipe} for {plan.site.name} "
                    f"to finish (lock {lock})",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,  # the path stays whole on one line
                )

            def storage_waiting(lock: Path) -> None:
                console.print(
                    f"  waiting for another build into the same image storage to finish "
                    f"(lock {lock})",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )

            with build_lock(plan, waiting), StepProgress(console) as progress:
                if fmt != "sif" or sif_from == "oci":
                    progress.note(f"  log: {build_log_path(plan)}")
                    result = build_image(
                        plan,
                        engine_name=engine_name,
                        on_step=progress.step,
                        site_mpi=not no_site_mpi,
                        on_wait=storage_waiting,
                    )
                    entry |= {"tag": result.tag, "seconds": round(result.seconds, 1)}
                    entry |= {"log": str(result.log_path), "up_to_date": result.reused}
                if fmt in ("sif", "both"):
                    import time

                    from hpcenv.sif import build_sif

                    progress.phase(f"SIF from {sif_from} with Apptainer")
                    started = time.monotonic()
                    sif = build_sif(plan, "def" if sif_from == "def" else "oci")
                    took = time.monotonic() - started
                    entry |= {"sif": str(sif), "sif_seconds": round(took, 1)}
            if entry.get("up_to_date"):
                console.print(
                    f"  image {entry['tag']} is up to date: its inputs are those of its last "
                    f"build (checked in {entry['seconds']:.0f} s); log: {entry['log']}"
                )
            elif "tag" in entry:
                console.print(
                    f"  image {entry['tag']} in {entry['seconds']:.0f} s; log: {entry['log']}"
                )
            if "sif" in entry:
                console.print(f"  SIF {entry['sif']} in {entry['sif_seconds']:.0f} s")
            sif_file = Path(str(entry["sif"])) if "sif" in entry else None
            delivered = []
            for step in deliveries[plan.recipe]:
                outcome = deliver(step, sif_file, env)
                console.print(f"  deliver: {outcome.detail}")
                delivered.append(
                    {"step": step.describe(), "done": outcome.done, "detail": outcome.detail}
                )
            entry["delivery"] = delivered
            from hpcenv.jobs.image_freshness import write_record

            write_record(plan.lock, deliveries[plan.recipe][-1].target)  # submit compares
            results.append(entry)
        if as_json:
            typer.echo(json.dumps(results, indent=2))


def _on_login(
    site: Site,
    plans: list[BuildPlan],
    fmt: str,
    engine: str | None,
    transport: TransportKind,
    ssh: SshOptions,
    *,
    dry_run: bool,
    as_json: bool,
    push: str | None,
) -> None:
    """``build --on-login``: each plan built on the login node (:mod:`hpcenv.remote_build`)."""
    from rich.console import Console

    from hpcenv.cli.progress import StepProgress
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.service import make_transport
    from hpcenv.jobs.transport import ssh_spec
    from hpcenv.remote_build import RemoteBuild, dry_run_summary

    if push:
        raise ConfigError("--push and --on-login: push from the login node after the build")
    if dry_run:
        if transport is TransportKind.ssh:
            spec = ssh_spec(site, ssh.host, ssh.port, ssh.user, ssh.key, ssh.known_hosts, env={})
            host = spec.describe()
        else:
            host = "local"
        summaries = [
            {"site": p.site.name, "recipe": p.recipe, "tag": p.tag}
            | dry_run_summary(p, host, fmt, engine)
            for p in plans
        ]
        if as_json:
            typer.echo(json.dumps(summaries, indent=2))
            return
        for s in summaries:
            typer.echo(f"plan: {s['recipe']} for {s['site']} -> {s['tag']} on the login node")
            typer.echo(f"  login node: {s['host']}\n  folder: {s['folder']}")
            typer.echo(f"  sends: {s['sends']}\n  builder: {s['builder']}")
            for line in s["commands"]:  # type: ignore[attr-defined]
                typer.echo(f"  run: {line}")
        return
    console = Console(stderr=True)
    t = make_transport(site, transport, ssh)
    results = []
    try:
        for plan in plans:
            console.print(
                f"[bold]build[/] {plan.recipe} for {site.name} -> {plan.tag} on {t.describe()}"
            )
            with StepProgress(console) as progress:
                from hpcenv.build import build_log_path

                progress.note(f"  log: {build_log_path(plan)}")
                r = RemoteBuild(
                    plan, t, fmt, engine, on_step=progress.step, note=progress.note
                ).run()
            console.print(
                f"  image {r.image} ({r.image_id[:12]}) built on {r.host} in {r.seconds:.0f} s; "
                f"log: {r.log_path}"
            )
            results.append(
                {
                    "recipe": plan.recipe,
                    "tag": r.tag,
                    "image": r.image,
                    "image_id": r.image_id,
                    "host": r.host,
                    "folder": r.folder,
                    "sent_files": r.sent_files,
                    "seconds": round(r.seconds, 1),
                    "log": str(r.log_path),
                }
            )
    finally:
        t.close()
    if as_json:
        typer.echo(json.dumps(results, indent=2))
