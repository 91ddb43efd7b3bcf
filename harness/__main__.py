from harness.running.locations import keep_caches_out_of_tmp

keep_caches_out_of_tmp()  # before torch is imported: its inductor fixes its folders on import

from harness.cli import main  # noqa: E402

raise SystemExit(main())
