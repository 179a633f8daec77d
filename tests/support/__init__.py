"""What the tests share, each thing defined once (tests/conftest.py registers the fixtures):

- ``stack``: the session's stack as tests see it (the ``stack`` fixture) and the PostgreSQL
  matrix's other servers;
- ``databases``: fresh databases (the ``source`` and ``target`` fixtures), SQL in one line, a
  write load;
- ``capture``: a capture in a thread (the ``prefix`` and ``start`` fixtures) or a process;
- ``topics``: topics read back and decoded, hand-made topic ownership;
- ``waiting``: waiting for a condition, a streaming slot, a snapshot; a loop in a thread;
- ``cli``: the ``bottler`` command as a child process, its one-line errors and its tables;
- ``spark``: one Spark session for the test session (the ``spark`` and ``spark_native``
  fixtures);
- ``own_stack``, ``kafka_node``, ``secured_kafka``: services of a test's own;
- ``search_api``: the search API (the ``client`` fixture);
- what several test modules use of one subject: ``loops`` (every consumer loop driven alike),
  ``conformance`` and its adapters, ``replica``, ``views``, ``translate``, ``avro_cases``,
  ``listeners``.
"""
