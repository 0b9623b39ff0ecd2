"""hpcenv: matched container stacks for distributed ML on HPC systems."""

__version__ = "0.1.0"
