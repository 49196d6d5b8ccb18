"""Apache Kafka's jars from Maven Central, cached in ``.cache/kafka/<version>/``.

A small pom is written into the cache and ``mvn dependency:copy-dependencies``
copies the artifact with its runtime dependencies into a temporary folder that
is renamed into place once complete, so an interrupted download is never taken
for a cache. The broker is ``org.apache.kafka:kafka_2.13``; the perf tools
(``ProducerPerformance``) are ``org.apache.kafka:kafka-tools``, kept in a folder
of their own because, where the tools of the broker's version are not served,
an older version's are used and their jars must not mix with the broker's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "kafka")
#: newest first: the first that Maven Central serves in full is used
BROKER_VERSIONS = ("4.4.0", "4.3.1", "4.2.0")
TOOLS_VERSIONS = ("4.4.0", "4.3.1", "4.2.0")

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sparklog.bench</groupId><artifactId>fetch-{artifact}</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>
      <version>{version}</version></dependency>
  </dependencies>
</project>
"""


@dataclass(frozen=True)
class Jars:
    """A folder of jars (``classpath`` is ``folder/*``) and the version it holds."""

    folder: str
    version: str

    @property
    def classpath(self) -> str:
        return os.path.join(self.folder, "*")


def maven_fetch(group: str, artifact: str, version: str, *, cache: str = CACHE,
                log=print) -> Jars:
    """``group:artifact:version`` with its runtime dependencies, from the cache or Maven.

    Raises RuntimeError (with Maven's last lines) if Maven cannot resolve it.
    """
    folder = os.path.join(cache, version, artifact)
    if os.path.isdir(folder):
        return Jars(folder, version)
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{artifact}-", dir=os.path.dirname(folder))
    try:
        with open(os.path.join(work, "pom.xml"), "w") as f:
            f.write(POM.format(group=group, artifact=artifact, version=version))
        log(f"fetching {group}:{artifact}:{version} from Maven Central ...")
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", os.path.join(work, "pom.xml"),
             "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={os.path.join(work, 'lib')}",
             # Maven's own repository inside the cache too: mvn leaves POM-only entries
             # in ~/.m2, and Spark's Ivy, which reads ~/.m2 first, failed on them
             f"-Dmaven.repo.local={os.path.join(cache, 'm2')}"],
            capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"mvn could not fetch {group}:{artifact}:{version}: "
                               + (proc.stdout + proc.stderr)[-1500:])
        os.rename(os.path.join(work, "lib"), folder)  # visible only once complete
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Jars(folder, version)


def fetch_kafka(*, tools: bool = True, log=print) -> tuple[Jars, Jars | None, list[str]]:
    """(broker jars, tools jars or None, notes on versions that were not served)."""
    notes: list[str] = []
    broker = _newest("kafka_2.13", BROKER_VERSIONS, notes, log)
    if broker is None:
        raise RuntimeError("no version of org.apache.kafka:kafka_2.13 could be fetched: "
                           + "; ".join(notes))
    tool_jars = _newest("kafka-tools", TOOLS_VERSIONS, notes, log) if tools else None
    if tool_jars is not None and tool_jars.version != broker.version:
        notes.append(f"kafka-tools {broker.version} is not served: using "
                     f"kafka-tools {tool_jars.version} against broker {broker.version}")
    return broker, tool_jars, notes


def _newest(artifact: str, versions: tuple[str, ...], notes: list[str], log) -> Jars | None:
    for version in versions:
        try:
            return maven_fetch("org.apache.kafka", artifact, version, log=log)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            notes.append(f"{artifact} {version}: {str(e).splitlines()[0][:200]}")
    return None
