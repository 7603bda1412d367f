"""The control database's schema on PostgreSQL (CL-7): the same tables and columns as the SQLite
file's (``schema``), as the ``control`` component's ordered migrations. Uniqueness the SQLite
file gets from its one writer at a time (a tenant's name) is a constraint here, so two machines
creating the same name at once cannot both succeed. A statement trigger on addresses and
identities bumps ``address_epoch`` and notifies ``ma_address_epoch`` (the SMTP door's cache).
Append only: never edit a released migration."""

from __future__ import annotations

from mailbox_actors.platform.postgres.migrations import Schema

__all__ = ["CONTROL"]

CONTROL = Schema("control", (
    (
        "CREATE TABLE tenants (id text PRIMARY KEY, name text NOT NULL UNIQUE, "
        "events_days integer NOT NULL, webhook_url text, webhook_secret text, "
        "created_at_ms bigint NOT NULL, status text NOT NULL DEFAULT 'active')",
        "CREATE TABLE identities (id text PRIMARY KEY, "
        "tenant_id text NOT NULL REFERENCES tenants (id), name text NOT NULL, "
        "mailbox_id text NOT NULL UNIQUE, status text NOT NULL "
        "CHECK (status IN ('creating', 'active', 'erased')), created_at_ms bigint NOT NULL, "
        "UNIQUE (tenant_id, name))",
        "CREATE TABLE domains (id text PRIMARY KEY, tenant_id text NOT NULL REFERENCES tenants (id), "
        "name text NOT NULL UNIQUE, monitor_id text NOT NULL UNIQUE, created_at_ms bigint NOT NULL, "
        "state text NOT NULL DEFAULT 'pending', state_seq bigint NOT NULL DEFAULT 0, "
        "state_at_ms bigint)",
        "CREATE INDEX domains_by_tenant ON domains (tenant_id, id)",
        "CREATE TABLE event_index (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "event_id text NOT NULL UNIQUE, tenant_id text NOT NULL, identity_id text, "
        "namespace text NOT NULL, object_id text NOT NULL, sequence bigint NOT NULL, "
        "type text NOT NULL, occurred_at_ms bigint NOT NULL)",
        "CREATE INDEX event_index_by_tenant ON event_index (tenant_id, seq)",
        "CREATE TABLE addresses (address text PRIMARY KEY, "
        "identity_id text NOT NULL REFERENCES identities (id), created_at_ms bigint NOT NULL)",
        "CREATE INDEX addresses_by_identity ON addresses (identity_id)",
        "CREATE TABLE address_epoch (id integer PRIMARY KEY CHECK (id = 1), n bigint NOT NULL)",
        "INSERT INTO address_epoch (id, n) VALUES (1, 0)",
        "CREATE FUNCTION ma_address_epoch_bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "UPDATE address_epoch SET n = n + 1 WHERE id = 1; "
        "PERFORM pg_notify('ma_address_epoch', ''); RETURN NULL; END $$",
        "CREATE TRIGGER address_epoch_addresses AFTER INSERT OR UPDATE OR DELETE ON addresses "
        "FOR EACH STATEMENT EXECUTE FUNCTION ma_address_epoch_bump()",
        "CREATE TRIGGER address_epoch_identities AFTER INSERT OR UPDATE OR DELETE ON identities "
        "FOR EACH STATEMENT EXECUTE FUNCTION ma_address_epoch_bump()",
    ),
))
