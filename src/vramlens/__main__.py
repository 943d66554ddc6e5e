import sys

from vramlens.cli.main import main

sys.exit(main())
