"""``python -m kumiko_typed``: the ``kumiko-typed`` command line where the console script is
not on ``PATH`` (an unactivated venv); named as the script so help and errors read the same."""

from ._cli import main

if __name__ == "__main__":
    main(prog_name="kumiko-typed")
