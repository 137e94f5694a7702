"""``python -m synth``: the same command line as the ``synth`` script."""

from synth.cli import main

if __name__ == "__main__":
    main()
