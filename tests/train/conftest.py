"""Fixtures of the train tests: the moto server of tests/awsfixtures.py (S3 checkpoint mirror)."""

from tests.awsfixtures import aws_env, moto_server, s3_env
