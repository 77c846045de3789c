import sys

from llama_swap.cli import main

sys.exit(main())
