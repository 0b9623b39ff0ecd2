"""``hpcenv sites ...`` and ``hpcenv recipes``: inspect and validate sites and recipes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

from hpcenv.choices import SshClient
from hpcenv.cli.options import SshClientOpt, SshConfigOpt


def register(app: typer.Typer) -> None:
    sites = typer.Typer(help="List, show, validate site files; export their JSON Schema.")
    app.add_typer(sites, name="sites")

    @sites.callback(invoke_without_command=True)
    def _default(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            ctx.invoke(list_sites)

    @sites.command("list")
    def list_sites(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        """List known sites (built-in and on HPCENV_SITE_PATH)."""
        from hpcenv.site import load_site, site_names

        rows = []
        for name in site_names():
            s = load_site(name)
            rows.append(
                {
                    "name": name,
                    "arch": s.arch,
                    "scheduler": s.scheduler.kind,
                    "runtime": s.runtime.kind,
                    "mpi": s.mpi.spec,
                    "model": s.mpi.model,
                    "gpus": s.node.gpus,
                    "recipes": s.recipes,
                }
            )
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        from rich.table import Table

        table = Table("site", "arch", "scheduler", "runtime", "host MPI (model)", "GPUs", "recipes")
        for r in rows:
            table.add_row(
                str(r["name"]),
                str(r["arch"]),
                str(r["scheduler"]),
                str(r["runtime"]),
                f"{r['mpi']} ({r['model']})",
                str(r["gpus"]),
                ", ".join(r["recipes"]),  # type: ignore[arg-type]
            )
        from hpcenv.cli.console import console

        console().print(table)

    @sites.command("show")
    def show(
        name: str,
        as_json: Annotated[bool, typer.Option("--json")] = False,
        resolved: Annotated[
            bool,
            typer.Option(
                "--resolved", help="the merged site (extends applied), each value's origin"
            ),
        ] = False,
    ) -> None:
        """Show one site, validated, with its provenance."""
        from hpcenv.credentials import redact
        from hpcenv.site import load_site, site_file

        site = load_site(name)
        data = site.model_dump(mode="json")
        if resolved:
            from hpcenv.site.load import resolve

            _show_resolved(data, resolve(site_file(name)), site.provenance, as_json)
            return
        if as_json:
            typer.echo(redact(json.dumps(data, indent=2)))
        else:
            import yaml

            typer.echo(redact(yaml.safe_dump(data, sort_keys=False)))

    @sites.command("validate")
    def validate(
        files: list[Path],
        strict: Annotated[
            bool, typer.Option("--strict", help="exit 1 when a site still holds placeholders")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        """Validate site files; errors name file, line and field; placeholders are flagged."""
        from hpcenv.site import load_site_file, placeholders

        flagged = 0
        docs = []
        for f in files:
            site = load_site_file(f)
            marks = placeholders(site)
            docs.append({"file": str(f), "site": site.name, "valid": True, "placeholders": marks})
            flagged += len(marks)
            if as_json:
                continue
            typer.echo(f"{f}: ok" + (f" ({len(marks)} placeholder(s) to replace)" if marks else ""))
            for field, what in marks.items():
                typer.echo(f"{f}: placeholder: {field}: {what}", err=True)
        if as_json:
            typer.echo(json.dumps(docs, indent=2))
        if strict and flagged:
            raise typer.Exit(1)

    @sites.command("init")
    def init(
        name: Annotated[str, typer.Argument(help="the new site's name (lowercase, dashes)")],
        from_host: Annotated[
            bool, typer.Option("--from-host", help="detect the site from this host's commands")
        ] = False,
        recorded: Annotated[
            Path | None,
            typer.Option("--recorded", help="read the commands' outputs from KEY.txt files here"),
        ] = None,
        extends: Annotated[
            str | None,
            typer.Option("--extends", help="without --from-host: a file that extends this site"),
        ] = None,
        ssh_host: Annotated[
            str | None,
            typer.Option("--ssh-host", help="with --from-host: detect on this login node over SSH"),
        ] = None,
        ssh_user: Annotated[str | None, typer.Option("--ssh-user")] = None,
        ssh_port: Annotated[int | None, typer.Option("--ssh-port", min=1, max=65535)] = None,
        ssh_key: Annotated[str | None, typer.Option("--ssh-key")] = None,
        known_hosts: Annotated[str | None, typer.Option("--known-hosts")] = None,
        ssh_config: SshConfigOpt = None,
        ssh_client: SshClientOpt = SshClient.openssh,
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="file to write (default: NAME.yaml)")
        ] = None,
        force: Annotated[bool, typer.Option("--force", help="replace an existing file")] = False,
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        """Write a site file: detected from this host (--from-host), or one that extends a site.

        Detected values are marked verified (with the command), guesses assumed, values only
        you know placeholder; the file is validated before it is kept.
        """
        from hpcenv.errors import ConfigError
        from hpcenv.hostdetect import LocalHost, RecordedHost, detect, site_data, write_site
        from hpcenv.site import load_site_file, placeholders

        if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
            raise ConfigError(f"site name {name!r}: lowercase letters, digits and dashes")
        target = out or Path(f"{name}.yaml")
        _check_init_paths(target, recorded)
        if from_host or recorded or ssh_host:
            if ssh_host:
                from pydantic import ValidationError

                from hpcenv.hostdetect import TransportHost
                from hpcenv.jobs.transport import TransportSpec, make_transport
                from hpcenv.safe import validation_message

                try:
                    spec = TransportSpec(
                        kind="ssh",
                        host=ssh_host,
                        port=ssh_port,
                        user=ssh_user,
                        key_file=ssh_key,
                        known_hosts=known_hosts,
                        client=ssh_client.value,
                        ssh_config=ssh_config,
                    )
                except ValidationError as err:
                    raise ConfigError(validation_message(err, "--ssh-host")) from None
                transport = make_transport(spec)
                try:
                    data = site_data(detect(TransportHost(transport), name))
                finally:
                    transport.close()
            else:
                host = RecordedHost(recorded) if recorded else LocalHost()
                data = site_data(detect(host, name))
        elif extends:
            from hpcenv.jobs.schedulers import SCHEDULERS
            from hpcenv.site import load_site

            base = load_site(extends)
            data = {
                "extends": extends,
                "name": name,
                "description": f"{base.description} (my settings)",
                "provenance": {"placeholder": {}},
            }
            kind = SCHEDULERS.get(base.scheduler.kind)
            if base.scheduler.account_required or (kind and kind.needs_account):
                data["scheduler"] = {"account": "PROJ123"}
                data["provenance"]["placeholder"]["scheduler.account"] = "your project id"
            if not data["provenance"]["placeholder"]:
                del data["provenance"]
        else:
            raise ConfigError(
                "say where the site comes from: --from-host, --recorded DIR or --extends SITE"
            )
        try:
            write_site(data, target, force=force, validate=load_site_file)
        except OSError as err:  # a read-only folder, a full disk, a file where a folder should be
            from hpcenv.errors import OutputError

            raise OutputError(f"cannot write {target}: {err.strerror or err}") from None
        site = load_site_file(target)
        marks = placeholders(site)
        if as_json:
            from hpcenv.credentials import redact

            doc = {"file": str(target), "site": site.model_dump(mode="json"), "placeholders": marks}
            typer.echo(redact(json.dumps(doc, indent=2)))
            return
        typer.echo(f"wrote {target} (valid)")
        for field, what in marks.items():
            typer.echo(f"{target}: placeholder: {field}: {what}", err=True)

    @sites.command("schema")
    def schema() -> None:
        """Print the JSON Schema of site files (for editors)."""
        from hpcenv.site import json_schema
        from hpcenv.site.fields import annotate_schema

        typer.echo(json.dumps(annotate_schema(json_schema()), indent=2, sort_keys=True))

    @sites.command("fields")
    def fields_cmd(
        field: Annotated[str | None, typer.Argument(help="one dotted field, e.g. mpi.pmi")] = None,
        markdown: Annotated[bool, typer.Option("--markdown", help="the docs page")] = False,
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        """Every site-file field: what it is, unit, example, where to find it on a cluster."""
        from hpcenv.errors import ConfigError, did_you_mean
        from hpcenv.site.fields import describe, fields, model_fields
        from hpcenv.site.fields import markdown as to_markdown

        names = model_fields()
        if field is not None and field not in names:
            raise ConfigError(f"no site field {field!r}{did_you_mean(field, names)}")
        chosen = [field] if field else names
        if markdown:
            typer.echo(to_markdown(), nl=False)
        elif as_json:
            typer.echo(json.dumps({n: fields().get(n, {}) for n in chosen}, indent=2))
        else:
            for n in chosen:
                typer.echo(f"{n}: {describe(n)}")

    @app.command("recipes")
    def recipes(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        """List recipes: what each image is for."""
        from hpcenv.recipe import load_recipe, recipe_names

        items = [load_recipe(n) for n in recipe_names()]
        if as_json:
            typer.echo(json.dumps([r.model_dump() for r in items], indent=2))
            return
        for r in items:
            comps = ", ".join(
                f"{k}{'' if v == 'required' else '?'}" for k, v in r.components.items()
            )
            typer.echo(f"{r.name:<12} {comps}\n{'':<12} {r.description}")


def _show_resolved(data: dict, resolved: object, provenance: object, as_json: bool) -> None:
    """Every leaf field with its value, the file:line that set it, and its provenance."""
    from hpcenv.credentials import redact
    from hpcenv.site.load import ResolvedSite, _leaves

    assert isinstance(resolved, ResolvedSite)
    notes: dict[str, str] = {}
    for kind in ("verified", "assumed", "placeholder"):
        for field, why in getattr(provenance, kind).items():
            notes[field] = f"{kind}: {why}"
    rows = []
    for leaf in _leaves({k: v for k, v in data.items() if k != "provenance"}):
        field = ".".join(str(p) for p in leaf)
        value: object = data
        for part in leaf:
            value = value[part]  # type: ignore[index]
        origin = resolved.origins.get(field) or next(
            (o for k, o in resolved.origins.items() if k.startswith(field + ".")), "default"
        )
        note = notes.get(field) or next(
            (n for k, n in notes.items() if field.startswith(k + ".")), ""
        )
        rows.append({"field": field, "value": value, "from": origin, "provenance": note})
    if as_json:
        doc = {"chain": [str(p) for p in resolved.chain], "fields": rows}
        typer.echo(redact(json.dumps(doc, indent=2)))
        return
    typer.echo("# " + " -> ".join(str(p) for p in resolved.chain))
    for r in rows:
        extra = f"  [{r['provenance']}]" if r["provenance"] else ""
        typer.echo(redact(f"{r['field']} = {json.dumps(r['value'])}  # {r['from']}{extra}"))


def _check_init_paths(target: Path, recorded: Path | None) -> None:
    """``sites init``'s paths, before anything is detected: one line for each mistake."""
    from hpcenv.errors import ConfigError

    if recorded is not None and not recorded.is_dir():
        what = "is not a folder" if recorded.exists() else "does not exist"
        raise ConfigError(f"--recorded {recorded} {what}; give the folder of KEY.txt outputs")
    if target.is_dir():
        raise ConfigError(f"--out {target} is a folder; give the site file's name")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"--out {target}: {parent} is not a folder")
