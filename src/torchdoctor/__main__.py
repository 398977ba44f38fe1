import sys

from torchdoctor.cli import main

sys.exit(main())
