"""``python -m prism_plugin.compat evaluate|compare|reference``: the PRISM package's ``prism`` CLI."""

import sys

from prism_plugin.compat.cli import main

if __name__ == "__main__":
    sys.exit(main())
