# naive single-stage build of the same stack (hpcenv bench): hpcenv's build stage and the
# runtime stage's tail in one stage; build inputs bind-mounted at /opt/hpcenv-build at build time
FROM localhost/hpcenv-base:bookworm
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_CONFIG_FILE="/opt/hpcenv-build/pip.conf" \
    PIP_DISABLE_PIP_VERSION_CHECK="1"
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates python3-venv && \
    rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv && \
    /opt/venv/bin/pip install --no-cache-dir --upgrade pip setuptools wheel
ENV PATH="/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: mpi4py==4.1.2 scikit-learn-intelex==2026.2.0 scikit-learn
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates libgomp1 libmpich12 libopenmpi3 mpich openmpi-bin python3 && \
    rm -rf /var/lib/apt/lists/*
RUN update-alternatives --set mpirun /usr/bin/mpirun.openmpi && \
    mkdir -p /opt/mpich-abi/lib && \
    ln -sf "$(find /usr/lib -name 'libmpich.so.12' | head -n 1)" /opt/mpich-abi/lib/libmpi.so.12
ENV PATH="/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HPCENV_LOCK="/opt/hpcenv/stack.lock.json" \
    HPCENV_SITE="local" \
    HPCENV_RECIPE="daal4py" \
    OMPI_MCA_plm_rsh_agent=""
COPY stack.lock.json /opt/hpcenv/stack.lock.json
ENV HPCENV_MPICH_ABI_LIB="/opt/mpich-abi/lib"
COPY checks /opt/hpcenv/checks
RUN useradd --create-home --uid 1000 --shell /bin/bash hpc && \
    /opt/venv/bin/python -c 'import mpi4py; import daal4py'
LABEL org.opencontainers.image.title="hpcenv daal4py for local" \
      org.opencontainers.image.description="hpcenv recipe daal4py, site local" \
      io.hpcenv.site="local" \
      io.hpcenv.recipe="daal4py" \
      io.hpcenv.platform="linux/amd64" \
      io.hpcenv.lock="{\"arch\":\"x86_64\",\"build\":{\"accelerator\":\"none\",\"base_image\":\"localhost/hpcenv-base:bookworm\",\"bootstrap_base\":true,\"debootstrap_suite\":\"bookworm\",\"engine\":\"podman\",\"jobs\":2,\"platform\":\"linux/amd64\",\"user\":\"hpc\"},\"components\":{\"arch\":{\"reason\":\"site local architecture\",\"source\":\"site\",\"version\":\"x86_64\"},\"daal4py\":{\"options\":{\"launcher\":\"mpiexec.mpich\",\"lib_dir\":\"/opt/mpich-abi/lib\",\"package\":\"scikit-learn-intelex==2026.2.0\",\"side_mpi\":\"mpich@4.0.2\"},\"reason\":\"distributed mode needs an MPICH-ABI libmpi.so.12 but the image MPI is openmpi (hybrid with the host); adds Debian MPICH 4.0.2 as a side runtime linked as /opt/mpich-abi/lib/libmpi.so.12, launched with mpiexec.mpich inside one container\",\"rules\":[\"daal4py-mpich-abi\"],\"source\":\"pip\",\"version\":\"2026.2.0\"},\"mpi\":{\"implementation\":\"openmpi\",\"options\":{\"abi\":\"openmpi\"},\"reason\":\"hybrid model: same MPI family and version as the host (openmpi@4.1.4)\",\"rules\":[\"mpi-hybrid-family\"],\"source\":\"apt\",\"version\":\"4.1.4\"},\"mpi4py\":{\"reason\":\"binary wheel; loads the image's openmpi at run time\",\"source\":\"pip\",\"version\":\"4.1.2\"},\"os\":{\"reason\":\"site local image OS (glibc 2.36)\",\"source\":\"base image\",\"version\":\"debian-12\"},\"pmix\":{\"reason\":\"PMIx of debian-12; major 4 matches host pmix@4 (srun --mpi=pmix)\",\"rules\":[\"mpi-hybrid-pmi\"],\"source\":\"apt\",\"version\":\"4.2.2\"},\"python\":{\"reason\":\"python3 of debian-12, in a venv at /opt/venv\",\"rules\":[\"os-python\"],\"source\":\"apt\",\"version\":\"3.11\"}},\"excluded\":{},\"mpi_model\":\"hybrid\",\"recipe\":\"daal4py\",\"rules\":{\"daal4py-mpich-abi\":\"scikit-learn-intelex docs, distributed mode (daal4py SPMD needs an MPICH-ABI libmpi.so.12, e.g. Intel MPI); platform measurements\",\"mpi-hybrid-family\":\"apptainer docs 'Singularity and MPI applications' (hybrid model: the host launcher starts the container's MPI); apptainer #5131, #1689\",\"mpi-hybrid-pmi\":\"Slurm mpi_guide (srun --mpi=pmix|pmi2); apptainer docs 'Singularity and MPI applications' (hybrid model); apptainer #5131, #1689\",\"os-python\":\"hpcenv builds its venv from the OS python3 (Debian 12: 3.11, Ubuntu 22.04: 3.10)\"},\"schema\":1,\"site\":\"local\"}" \
      io.hpcenv.component.arch="x86_64" \
      io.hpcenv.component.daal4py="2026.2.0" \
      io.hpcenv.component.mpi="openmpi@4.1.4" \
      io.hpcenv.component.mpi4py="4.1.2" \
      io.hpcenv.component.os="debian-12" \
      io.hpcenv.component.pmix="4.2.2" \
      io.hpcenv.component.python="3.11"
USER hpc
WORKDIR /home/hpc
CMD ["/bin/bash"]
