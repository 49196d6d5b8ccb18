"""spark-submit entry of ``sparklog materialize``: a topic as a Delta table on a cluster.

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 jobs/materialize.py \\
        --store s3://bucket/log materialize clicks --table clicks --once

Takes the CLI's arguments (``sparklog --help``; any command works, ``sql`` too); the session spark-submit
created is reused, so the master and resources come from spark-submit.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
