"""``python -m hpcenv``: the same command as ``hpcenv``."""

from hpcenv.cli.main import main

if __name__ == "__main__":
    main()
