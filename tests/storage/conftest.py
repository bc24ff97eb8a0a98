"""Fixtures of the storage tests: a real moto server process and a fresh bucket per S3 test."""

from tests.awsfixtures import aws_env, moto_server, s3_env
