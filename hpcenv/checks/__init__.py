"""Standalone check scripts that run inside hpcenv images (baked at ``/opt/hpcenv/checks``).

Each ``*.py`` script here uses only the stdlib, numpy and the stack under test (mpi4py, torch,
Horovod, daal4py), runs under an MPI or torch launcher, and prints one JSON document of measured
numbers on rank 0. Modules starting with ``_`` are helpers the scripts import as siblings; the host
side imports them through this package (``hpcenv.checks._idx``).
"""
