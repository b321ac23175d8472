from vpncrypt.cli import main

raise SystemExit(main())
