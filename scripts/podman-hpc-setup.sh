#!/usr/bin/env bash
# Install NERSC's podman-hpc (the Perlmutter runtime: build, migrate, run --mpi) for the rehearsal
# on this host, the way a centre installs it: its own venv under a site prefix, its site config,
# its OCI hook and a `modules.d` whose `--mpi` module binds this host's "site MPI" (Intel MPI from
# scripts/site-mpi-setup.sh) where NERSC's binds Cray MPICH.
#
# Result (idempotent; a second run with the same version only rewrites the configuration files):
#   $PREFIX/venv/                        python venv with podman-hpc==$VERSION (PyPI; LBNL code)
#   $PREFIX/bin/podman-hpc               the command (a wrapper, see below);
#                                        /usr/local/bin/podman-hpc links to it (Slurm jobs find
#                                        it on the default PATH)
#   $PREFIX/libexec/                     fuse-overlayfs-wrap (podman-hpc's mount program) and
#                                        mksquashfs.static (migrate), the helpers it looks up
#   $PREFIX/etc/podman_hpc/podman_hpc.yaml      the site config (PODMANHPC_CONFIG_FILE)
#   $PREFIX/etc/podman_hpc/modules.d/*.yaml     the `run` modules: mpich (--mpi), home, scratch
#   $PREFIX/etc/containers.conf          hpcenv's containers.conf (when CONTAINERS_CONF is unset)
#   $PREFIX/share/containers/oci/hooks.d/02-hook_tool.json
#                                        the prestart hook that does the modules' binds and copies
#                                        (podman-hpc's configure_hooks.py writes the same)
#   $SQUASH_DIR (default /var/tmp/podman-hpc/squash)  the squashed-image store `migrate` fills
# Env: HPCENV_PODMAN_HPC_PREFIX (default /opt/site/podman-hpc), HPCENV_PODMAN_HPC_VERSION (1.2.2),
#      HPCENV_SITE_MPI_PREFIX (default /opt/site/intel-mpi: what the --mpi module binds).
# hpcenv's rehearsal site site-configs/local-podman-hpc.yaml runs on this install as it is: its
# builds and jobs set none of the variables below, so `hpcenv build` migrates into the wrapper's
# default squash store and the job's `podman-hpc run --mpi` reads it (a test gives the job an
# empty graph root, PODMANHPC_GRAPH_ROOT/RUN_ROOT, as a compute node's).
#
# System packages (podman-hpc's documented needs): squashfs-tools, squashfuse (mounts a squashed
# image's layer at run time, from fuse-overlayfs-wrap), fuse-overlayfs (the mount program), and
# inotify-tools: fuse-overlayfs-wrap starts `inotifywait` to unmount the squashfuse mount when the
# container's overlay goes away; without it the squashfuse mounts are never unmounted.
#
# Adaptations from NERSC's shipped config (podman-hpc targets rootless users on Perlmutter; here it
# runs as root with podman 4.3, no registry and the project's containers.conf), each and why:
# 1. mksquashfs 4.6+ built statically from Debian's source (trixie's squashfs-tools, apt-get
#    source): `migrate` bind-mounts `mksquashfs_bin` into a container of the image itself and runs
#    it there, so it must be static (the image has none of the host's libraries), and it passes
#    `-xattrs-exclude security.capability`, an option squashfs-tools 4.6 added: bookworm's 4.5.1
#    rejects it. Built with gzip + lz4 only (podman-hpc uses `-comp lz4`); ~6 s on 2 cores.
# 2. graph_root/run_root = root's own store (/var/lib/containers/storage, /run/containers/storage)
#    instead of NERSC's /tmp/{{ uid }}_hpc/storage: as root, the user's store IS the system store,
#    and the bases hpcenv made there (debootstrap + podman import: no registry to pull FROM) must be
#    visible to `podman-hpc build`, and `migrate` reads from the graph root. The run root must be
#    that store's own: libpod's database refuses a graph root opened with another run root.
#    A job that should run only from the squashed copy (as a Perlmutter compute node does, whose
#    /tmp store is empty) sets PODMANHPC_GRAPH_ROOT and PODMANHPC_RUN_ROOT to a node-local folder.
# 3. squash_dir: podman-hpc takes it from SQUASH_DIR or `--squash-dir` only (not the config file),
#    default $SCRATCH/storage; this host has no $SCRATCH, so the wrapper sets SQUASH_DIR when unset.
# 4. The wrapper sets USER when unset: podman-hpc calls os.getlogin() (fails without a terminal),
#    then reads $USER, which a root shell without a login (containers, some CI) lacks: KeyError.
# 5. The wrapper puts $PREFIX/libexec first on PATH: podman-hpc looks up fuse-overlayfs-wrap on
#    PATH when it starts (before reading the config) and refuses to run without it.
# 6. The wrapper sets CONTAINERS_CONF (when unset) to hpcenv's containers.conf (runc, cgroupfs,
#    lower ulimits, file events): podman-hpc passes the environment through to podman, and podman
#    4.3 on this host needs those settings (docs: platform notes). podman-hpc itself passes
#    `--cgroup-manager cgroupfs` and picks no runtime, so runc comes from that file.
# 7. The mpich module (`--mpi`) binds Intel MPI ($HPCENV_SITE_MPI_PREFIX) at NERSC's place for
#    Cray MPICH, /opt/udiImage/modules/mpich (so site-configs/perlmutter.yaml's mpi.root is the
#    same path here), with the Intel MPI settings that path needs (I_MPI_ROOT, FI_PROVIDER_PATH,
#    FI_PROVIDER=shm) and I_MPI_PMI=pmi2: jobs use `srun --mpi=pmi2`, whose PMI_FD podman-hpc
#    carries into the container (its pmi_fd(): dup to fd 3, `--preserve-fds 1`), as Cray MPICH's
#    PMI does on Perlmutter; Intel MPI's own PMI2 client needs no library bound. Like NERSC's it
#    is `shared_run: True` (one container per node, every rank a `podman exec` into it). Each
#    podman option is its own list item (`--env=SLURM_*`), where NERSC writes `-e SLURM_*` as one.
#    NERSC's openmpi-pmix module is not installed: its `--userns=keep-id` is rootless-only
#    (rootful podman refuses it); gpu, nccl, cuda-mpi, cvmfs and cfs bind Perlmutter paths that
#    this host lacks.
set -euo pipefail
PREFIX=${HPCENV_PODMAN_HPC_PREFIX:-/opt/site/podman-hpc}
VERSION=${HPCENV_PODMAN_HPC_VERSION:-1.2.2}
SITE_MPI=${HPCENV_SITE_MPI_PREFIX:-/opt/site/intel-mpi}
SQUASH=/var/tmp/podman-hpc/squash
repo=$(cd "$(dirname "$0")/.." && pwd)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# -- system packages ---------------------------------------------------------------------------
pkgs=(squashfs-tools squashfuse fuse-overlayfs inotify-tools python3-venv)
missing=()
for p in "${pkgs[@]}" gcc make liblz4-dev zlib1g-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "podman-hpc-setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

$SUDO install -d -m 0755 "$PREFIX" "$PREFIX/bin" "$PREFIX/libexec" \
  "$PREFIX/etc/podman_hpc/modules.d" \
  "$PREFIX/share/containers/oci/hooks.d"

# -- podman-hpc in its own venv ----------------------------------------------------------------
installed=$(cat "$PREFIX/venv/VERSION" 2>/dev/null || true)
if ! { [ -x "$PREFIX/venv/bin/podman-hpc" ] && [ "$installed" = "$VERSION" ]; }; then
  rm -rf "$PREFIX/venv"
  python3 -m venv "$PREFIX/venv"
  "$PREFIX/venv/bin/pip" install -q --disable-pip-version-check "podman-hpc==$VERSION" 2>&1 |
    grep -v "is ignored: it is neither" >&2 || true
  if [ ! -x "$PREFIX/venv/bin/podman-hpc" ]; then
    echo "podman-hpc-setup: pip did not install podman-hpc $VERSION" >&2; exit 1
  fi
  echo "$VERSION" >"$PREFIX/venv/VERSION"
fi
ln -sfn ../venv/bin/fuse-overlayfs-wrap "$PREFIX/libexec/fuse-overlayfs-wrap"

# -- mksquashfs.static (adaptation 1) ----------------------------------------------------------
if ! { [ -x "$PREFIX/libexec/mksquashfs.static" ] &&
       "$PREFIX/libexec/mksquashfs.static" -help 2>&1 | grep -q -- -xattrs-exclude; }; then
  work=$(mktemp -d /tmp/podman-hpc-setup.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/sources"
  # Debian's own source package from the mirror apt already uses, through apt's own client (a
  # private sources folder and lists: nothing under /etc/apt changes).
  uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  cat >"$work/sources/src.sources" <<SRC
Types: deb-src
URIs: ${uri:-http://deb.debian.org/debian}
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt_opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work/sources"
            -o "Dir::State::lists=$work/lists" -o Acquire::Check-Valid-Until=false
            -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work" && apt-get "${apt_opts[@]}" source -qq --download-only squashfs-tools)
  tar -C "$work" -xzf "$work"/squashfs-tools_*.orig.tar.gz
  make -s -C "$work"/squashfs-tools-*/squashfs-tools -j2 GZIP_SUPPORT=1 LZ4_SUPPORT=1 XZ_SUPPORT=0 \
    LZO_SUPPORT=0 ZSTD_SUPPORT=0 XATTR_SUPPORT=1 EXTRA_LDFLAGS=-static mksquashfs 2>&1 |
    grep -v -e "statically linked applications requires" -e "in function" >&2 || true
  install -m 0755 "$work"/squashfs-tools-*/squashfs-tools/mksquashfs \
    "$PREFIX/libexec/mksquashfs.static"
  "$PREFIX/libexec/mksquashfs.static" -help 2>&1 | grep -q -- -xattrs-exclude ||
    { echo "podman-hpc-setup: the mksquashfs built lacks -xattrs-exclude" >&2; exit 1; }
  rm -rf "$work"; trap - EXIT
fi

# -- configuration: written whole each run (names of this run's own, then renamed) --------------
put() { # put MODE DEST: stdin -> DEST, replaced whole
  cat >"$2.new.$$"; chmod "$1" "$2.new.$$"; mv -f "$2.new.$$" "$2"
}
put 0644 "$PREFIX/etc/containers.conf" <"$repo/hpcenv/data/containers.conf"

put 0644 "$PREFIX/etc/podman_hpc/podman_hpc.yaml" <<YAML
# Written by hpcenv scripts/podman-hpc-setup.sh (NERSC's shipped file, adapted: see the script).
podman_bin: /usr/bin/podman
mount_program: $PREFIX/libexec/fuse-overlayfs-wrap
mksquashfs_bin: $PREFIX/libexec/mksquashfs.static
modules_dir: $PREFIX/etc/podman_hpc/modules.d
hooks_dir: $PREFIX/share/containers/oci/hooks.d
shared_run_exec_args: ["-e", "SLURM_*", "-e", "PALS_*", "-e", "PMI_*"]
shared_run_command: ["sleep", "infinity"]
localid_var: SLURM_LOCALID
tasks_per_node_var: SLURM_STEP_TASKS_PER_NODE
ntasks_pattern: "[0-9]+"
graph_root: /var/lib/containers/storage
run_root: /run/containers/storage
config_home_template: "/tmp/{{ uid }}_hpc/config"
YAML

put 0644 "$PREFIX/etc/podman_hpc/01-mpich.conf" <<CONF
/opt/udiImage/modules/mpich/lib
CONF
put 0644 "$PREFIX/etc/podman_hpc/modules.d/mpich.yaml" <<YAML
# The rehearsal's --mpi: this host's site MPI ($SITE_MPI, Intel MPI, MPICH ABI) where NERSC's
# mpich.yaml binds Cray MPICH (/usr/lib/shifter/mpich-2.2). Jobs: srun --mpi=pmi2.
name: mpich
cli_arg: mpi
help: Enable the site MPI (Intel MPI from $SITE_MPI at /opt/udiImage/modules/mpich)
env: ENABLE_MPICH_SS
conflicts: ["cuda-mpi", "openmpi-pmi2", "openmpi-pmix"]
shared_run: True
additional_args:
  - --env=SLURM_*
  - --env=PALS_*
  - --env=PMI_*
  - --env=LD_LIBRARY_PATH=/opt/udiImage/modules/mpich/lib
  - --env=I_MPI_ROOT=/opt/udiImage/modules/mpich
  - --env=I_MPI_PMI=pmi2
  - --env=FI_PROVIDER_PATH=/opt/udiImage/modules/mpich/lib
  - --env=FI_PROVIDER=shm
  - --ipc=host
  - --network=host
  - --pid=host
  - --privileged
copy:
  - ../01-mpich.conf:/etc/ld.so.conf.d/02-mpich.conf
bind:
  - /dev/shm:/dev/shm
  - $SITE_MPI:/opt/udiImage/modules/mpich
YAML
# NERSC's own home and scratch modules, as the wheel ships them (data files under the venv).
for m in home scratch; do
  put 0644 "$PREFIX/etc/podman_hpc/modules.d/$m.yaml" \
    <"$PREFIX/venv/etc/podman_hpc/modules.d/$m.yaml"
done

# The hook podman runs at prestart for containers podman-hpc starts (annotation
# podman_hpc.hook_tool=true): the same JSON as podman-hpc's configure_hooks.py writes.
put 0644 "$PREFIX/share/containers/oci/hooks.d/02-hook_tool.json" <<JSON
{
    "version": "1.0.0",
    "hook": {"path": "$PREFIX/venv/bin/hook_tool", "args": ["hook_tool"]},
    "when": {"annotations": {"podman_hpc.hook_tool": "true"}},
    "stages": ["prestart"]
}
JSON

put 0755 "$PREFIX/bin/podman-hpc" <<SH
#!/bin/sh
# podman-hpc $VERSION as installed by hpcenv scripts/podman-hpc-setup.sh (its comments say why
# each default below is set). Every one yields to the caller's own value.
export PODMANHPC_CONFIG_FILE="\${PODMANHPC_CONFIG_FILE:-$PREFIX/etc/podman_hpc/podman_hpc.yaml}"
export CONTAINERS_CONF="\${CONTAINERS_CONF:-$PREFIX/etc/containers.conf}"
export SQUASH_DIR="\${SQUASH_DIR:-$SQUASH}"
export USER="\${USER:-\$(id -un)}"
export PATH="$PREFIX/libexec:\${PATH:-/usr/local/bin:/usr/bin:/bin}"
exec "$PREFIX/venv/bin/podman-hpc" "\$@"
SH
$SUDO install -d -m 0755 /var/tmp/podman-hpc
ln -sfn "$PREFIX/bin/podman-hpc" /usr/local/bin/podman-hpc
echo "podman-hpc-setup: podman-hpc $VERSION in $PREFIX (/usr/local/bin/podman-hpc)," \
  "default squash store $SQUASH"
