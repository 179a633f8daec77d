"""The warehouse load: a PySpark job merging the table topics into Delta Lake tables."""
