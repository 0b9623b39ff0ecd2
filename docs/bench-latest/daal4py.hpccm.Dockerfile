FROM localhost/hpcenv-base:bookworm

# hpccm recipe: hpcenv/bench/hpccm_daal4py.py (build-cost comparison)

ENV PIP_CONFIG_FILE=/opt/hpcenv-build/pip.conf \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates \
        python3-venv && \
    rm -rf /var/lib/apt/lists/*

RUN apt-get update -y && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmpich-dev \
        libopenmpi-dev \
        mpich \
        openmpi-bin && \
    rm -rf /var/lib/apt/lists/*

RUN mkdir -p /opt/mpich-abi/lib && \
    ln -sf "$(find /usr/lib -name 'libmpich.so.12' | head -n 1)" /opt/mpich-abi/lib/libmpi.so.12

RUN python3 -m venv /opt/venv && \
    /opt/venv/bin/pip install --no-cache-dir --upgrade pip setuptools wheel

ENV HPCENV_MPICH_ABI_LIB=/opt/mpich-abi/lib \
    OMPI_MCA_plm_rsh_agent= \
    PATH=/opt/venv/bin:$PATH

# pip
RUN /opt/venv/bin/pip --no-cache-dir install mpi4py==4.1.2 scikit-learn-intelex==2026.2.0 scikit-learn

COPY stack.lock.json /opt/hpcenv/stack.lock.json

COPY checks /opt/hpcenv/checks

RUN useradd --create-home --uid 1000 --shell /bin/bash hpc && \
    /opt/venv/bin/python -c 'import mpi4py; import daal4py'

LABEL io.hpcenv.bench=hpccm-daal4py

USER hpc

WORKDIR /home/hpc
