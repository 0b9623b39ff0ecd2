"""``hpcenv submit``: parse the options into a :class:`~hpcenv.jobs.service.SubmitRequest`,
call :func:`~hpcenv.jobs.service.submit_request`, print its result (issue 18: a thin CLI)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from hpcenv.choices import SshClient, TransportKind
from hpcenv.cli.follow import WaitTimeoutOpt, stopped, watcher
from hpcenv.cli.options import (
    JsonOpt,
    OptionalSiteOpt,
    PipOpt,
    RequirementsOpt,
    SshClientOpt,
    SshConfigOpt,
    complete_recipe,
    job_name,
    log_name,
    need,
    project_values,
    walltime,
)


def _stderr(line: str) -> None:
    from hpcenv.printable import printable

    typer.echo(printable(line), err=True)  # may quote a scheduler or a tuning file


def register(app: typer.Typer) -> None:
    @app.command("submit")
    def submit_cmd(
        ctx: typer.Context,
        site: OptionalSiteOpt = None,
        command: Annotated[
            list[str] | None, typer.Argument(help="command to run (after --)")
        ] = None,
        recipe: Annotated[
            str | None,
            typer.Option(
                "--recipe", "-r", help="recipe (default image)", autocompletion=complete_recipe
            ),
        ] = None,
        requirements: RequirementsOpt = None,
        pip: PipOpt = None,
        launcher: Annotated[
            str | None,
            typer.Option(
                "--launcher", help="rank launcher: the site's (default), or torchrun (one per node)"
            ),
        ] = None,
        nodes: Annotated[int, typer.Option("--nodes", "-N")] = 1,
        ntasks: Annotated[
            int | None,
            typer.Option("--ntasks", "-n", help="total tasks (ranks), as in Slurm"),
        ] = None,
        ranks_per_node: Annotated[
            int | None, typer.Option("--ntasks-per-node", "--ranks-per-node")
        ] = None,
        cpus_per_task: Annotated[
            int | None,
            typer.Option("--cpus-per-task", "-c", help="the scheduler's CPUs per task (Slurm -c)"),
        ] = None,
        cores_per_rank: Annotated[
            int | None, typer.Option("--cores-per-rank", help="physical cores per rank")
        ] = None,
        gpus_per_task: Annotated[int | None, typer.Option("--gpus-per-task")] = None,
        gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node")] = None,
        ccl_workers: Annotated[int | None, typer.Option("--ccl-workers")] = None,
        image: Annotated[str | None, typer.Option("--image", help="image tag or SIF path")] = None,
        no_container: Annotated[
            bool, typer.Option("--no-container", help="run on the host")
        ] = False,
        name: Annotated[
            str | None,
            typer.Option("--job-name", "-J", "--name", help="job name", callback=job_name),
        ] = None,
        workdir: Annotated[
            str | None,
            typer.Option(
                "--workdir", help="hpcenv's folder (steps, logs); default <scratch>/hpcenv-jobs"
            ),
        ] = None,
        chdir: Annotated[
            str | None,
            typer.Option(
                "--chdir", "-D", help="where the command runs (default: the current folder)"
            ),
        ] = None,
        time: Annotated[
            str | None,
            typer.Option(
                "--time", "-t", "--walltime", help="MM, HH:MM:SS or D-HH:MM:SS", callback=walltime
            ),
        ] = None,
        stdout: Annotated[
            str | None,
            typer.Option(
                "--output",
                "-o",
                help="stdout file name (%j %x ...) or folder/; default NAME-%j.out beside the "
                "submit folder (in --workdir when given)",
                callback=log_name,
            ),
        ] = None,
        stderr: Annotated[
            str | None,
            typer.Option(
                "--error",
                "-e",
                help="stderr file name (%j %x ...) or folder/; default NAME-%j.err as -o",
                callback=log_name,
            ),
        ] = None,
        account: Annotated[
            str | None,
            typer.Option("--account", "-A", help="project/account to charge (sites need one)"),
        ] = None,
        queue: Annotated[
            str | None, typer.Option("--partition", "--queue", "-p", help="partition/queue")
        ] = None,
        qos: Annotated[str | None, typer.Option("--qos", "-q", help="Slurm QOS")] = None,
        constraint: Annotated[
            str | None, typer.Option("--constraint", "-C", help="node features (Slurm -C)")
        ] = None,
        option: Annotated[
            list[str] | None,
            typer.Option(
                "--option",
                help="any other scheduler option, one per --option (e.g. '-l filesystems=home')",
            ),
        ] = None,
        option_override: Annotated[
            bool,
            typer.Option(
                "--option-override",
                help="let --option replace hpcenv's own directives (logs, workdir, name...)",
            ),
        ] = False,
        single: Annotated[
            bool, typer.Option("--single", help="run once in the batch shell, not per rank")
        ] = False,
        stage_in: Annotated[
            str | None,
            typer.Option("--stage-in", help="dataset dir to stage to node-local storage"),
        ] = None,
        stage_out: Annotated[
            str | None, typer.Option("--stage-out", help="copy {output} here atomically")
        ] = None,
        array: Annotated[
            str | None,
            typer.Option(
                "--array", help="job array: N tasks, or 0-LAST as in Slurm; %P: P at once ({task})"
            ),
        ] = None,
        after: Annotated[
            list[str] | None, typer.Option("--after", help="start after this job succeeds")
        ] = None,
        env: Annotated[
            list[str] | None,
            typer.Option(
                "--env",
                help="NAME=VALUE for every rank, or NAME: this shell's value, passed by name "
                "(secrets: never written); repeatable",
            ),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="allow over-subscription / overwrite")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="print the script, submit nothing")
        ] = False,
        no_site_mpi: Annotated[
            bool,
            typer.Option("--no-site-mpi", help="bind model: keep the image's MPI (control run)"),
        ] = False,
        as_json: JsonOpt = False,
        transport: Annotated[
            TransportKind, typer.Option("--transport", help="local or ssh")
        ] = TransportKind.local,
        ssh_host: Annotated[str | None, typer.Option("--ssh-host")] = None,
        ssh_port: Annotated[int | None, typer.Option("--ssh-port", min=1, max=65535)] = None,
        ssh_user: Annotated[str | None, typer.Option("--ssh-user")] = None,
        ssh_key: Annotated[str | None, typer.Option("--ssh-key")] = None,
        known_hosts: Annotated[str | None, typer.Option("--known-hosts")] = None,
        ssh_config: SshConfigOpt = None,
        ssh_client: SshClientOpt = SshClient.openssh,
        wait: Annotated[
            bool,
            typer.Option(
                "--wait",
                help="wait while the job lives; exit 2 with the scheduler's message on failure",
            ),
        ] = False,
        timeout: WaitTimeoutOpt = None,
    ) -> None:
        """Render a job script for SITE and submit it (``-- COMMAND...``)."""
        from hpcenv.jobs.service import SshOptions, SubmitRequest, WaitInterrupted, submit_request

        got = project_values(  # ./hpcenv.yaml under the options given (issue 37)
            ctx,
            {
                "site": site,
                "recipe": recipe,
                "requirements": requirements,
                "pip": pip,
                "account": account,
                "nodes": nodes,
                "time": time,
                "launcher": launcher,
                "partition": queue,
                "qos": qos,
                "env": env,
                "stage_in": stage_in,
                "stage_out": stage_out,
            },
            defaults={"nodes": 1},
            params={"partition": "queue"},
        )
        req = SubmitRequest(
            site=need(got, "site"),
            command=tuple(command or ()),
            recipe=got.get("recipe"),
            requirements=tuple(got.get("requirements", ())),
            pip=tuple(got.get("pip", ())),
            launcher=got.get("launcher"),
            nodes=got["nodes"],
            ntasks=ntasks,
            ranks_per_node=ranks_per_node,
            cpus_per_task=cpus_per_task,
            cores_per_rank=cores_per_rank,
            gpus_per_task=gpus_per_task,
            gpus_per_node=gpus_per_node,
            ccl_workers=ccl_workers,
            image=image,
            no_container=no_container,
            name=name,
            workdir=workdir,
            chdir=chdir,
            walltime=got.get("time"),
            stdout=stdout,
            stderr=stderr,
            account=got.get("account"),
            queue=got.get("partition"),
            qos=got.get("qos"),
            constraint=constraint,
            options=tuple(option or ()),
            option_override=option_override,
            single=single,
            stage_in=got.get("stage_in"),
            stage_out=got.get("stage_out"),
            array=array,
            after=tuple(after or ()),
            env=tuple(got.get("env", ())),
            force=force,
            dry_run=dry_run,
            site_mpi=not no_site_mpi,
            transport=transport,
            ssh=SshOptions(
                ssh_host, ssh_port, ssh_user, ssh_key, known_hosts, ssh_config, ssh_client
            ),
            wait=wait,
            timeout=timeout,
        )
        try:
            result = submit_request(req, notify=_stderr, on_change=watcher())
        except WaitInterrupted as err:
            raise stopped(err) from None
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            typer.echo(result.text(), nl=False)
