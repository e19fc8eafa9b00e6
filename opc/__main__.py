import sys

from opc.cli import main

sys.exit(main())
