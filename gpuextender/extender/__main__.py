"""`python -m gpuextender.extender`: the same as the gpu-extender command."""

import sys

from gpuextender.extender.main import main

sys.exit(main())
