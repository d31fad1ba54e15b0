"""`python -m gpuextender.agent`: the same as the gpu-agent command."""

import sys

from gpuextender.agent.cli import main

sys.exit(main())
