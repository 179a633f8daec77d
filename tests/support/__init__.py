"""What the tests share, each thing defined once (tests/conftest.py registers the fixtures):

- ``stack``: the session's stack as tests see it (RunningStack) and the PostgreSQL matrix;
- ``databases``: fresh databases (the ``source`` and ``target`` fixtures), SQL in one line, a
  write load;
- ``capture``: a capture in a thread or a process (the ``prefix`` and ``start`` fixtures);
- ``topics``: reading topics back, decoding them, hand-made topic ownership;
- ``waiting``: waiting for a condition, a streaming slot, a snapshot; a loop in a thread;
- ``cli``: the ``bottler`` command as a child process, and its one-line errors;
- ``spark``: the Spark sessions (the ``spark`` and ``spark_native`` fixtures);
- ``own_stack``, ``kafka_node``, ``secured_kafka``: services of a test's own;
- ``loops``, ``conformance*``, ``replica``, ``translate``, ``avro_cases``, ``search_api``,
  ``listeners``, ``status``: what several test modules use of one subject.
"""
