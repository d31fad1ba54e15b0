"""`python -m gpuextender.agent`: the same as the gpu-agent command."""

import sys

from gpuextender.agent.main import main

sys.exit(main())
