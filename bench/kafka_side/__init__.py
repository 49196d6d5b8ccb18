"""Apache Kafka beside sparklog, for ``bench/vs_kafka.py``.

``fetch`` brings Kafka's jars from Maven Central into ``.cache/kafka/`` (never
committed), ``broker`` runs a single-node KRaft broker from them, and the
``*_clients`` modules hold each side's workloads with the same signatures. This
is a package (not named ``kafka``: a script run as ``python bench/x.py`` has
``bench/`` first on sys.path, where it would shadow a ``kafka`` client library).
"""
