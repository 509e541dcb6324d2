"""`python -m aaco_pipelines.cli`: the `aaco` command (all commands: see __init__)."""

import sys

from aaco_pipelines.cli import main

sys.exit(main())
