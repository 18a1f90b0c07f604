# A stand-in for the compose file's postgres:17-alpine where no container registry can be reached:
# Debian bookworm's PostgreSQL 15 on the stand-in base (deploy/docker/build_images.py builds it). It reads
# the official image's settings (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB) and keeps its data in the
# same place, /var/lib/postgresql/data.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d -o postgres -g postgres /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    POSTGRES_USER=postgres \
    POSTGRES_DB=postgres
USER postgres
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint.sh"]
