from dmocker.cli.main import main

raise SystemExit(main())
