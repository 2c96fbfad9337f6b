import sys

from adapters_lib.engine.daemon import main

sys.exit(main())
