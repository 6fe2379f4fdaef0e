from symmem.cli.main import main

raise SystemExit(main())
