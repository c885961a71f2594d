"""`python -m pong_mp` is the same as the `pong-mp` command."""

from pong_mp.cli import main

if __name__ == "__main__":
    main(prog_name="pong-mp")
