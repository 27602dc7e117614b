import sys

from .run import _child

if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        raise SystemExit(_child(sys.argv[2:]))
    raise SystemExit("usage: braze bench --suite programs [--markdown FILE]")
