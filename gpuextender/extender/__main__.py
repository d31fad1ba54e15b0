"""`python -m gpuextender.extender`: the same as the gpu-extender command."""

import sys

from gpuextender.extender.cli import main

sys.exit(main())
