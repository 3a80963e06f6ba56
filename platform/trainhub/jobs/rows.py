"""Inserting many new rows of a model at once: COPY on PostgreSQL, a bulk insert else.

For the scheduler's batched starts (`services/batch_placement.py`): Django's bulk insert
spends most of its time preparing each field of each instance (24,000 tasks took 5 s of
a 10,000-job cycle's writes); COPY takes the values as they are. The caller gives plain
values for the columns it names; the model's other fields must have database-safe
defaults that the caller includes (COPY knows no Django defaults).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model


def insert_rows(model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Insert `rows` (values in the order of `fields`, model field names; a list or dict
    value of a JSON field as is) into `model`'s table."""
    columns = []
    for name in fields:
        field = model._meta.get_field(name)
        assert isinstance(field, Field), f"{model.__name__}.{name} is not a column"
        columns.append(field)
    json_at = [i for i, f in enumerate(columns) if f.get_internal_type() == "JSONField"]
    if connection.vendor != "postgresql":
        model.objects.bulk_create(  # type: ignore[attr-defined]
            model(**dict(zip(fields, row, strict=True))) for row in rows
        )
        return
    names = ", ".join(connection.ops.quote_name(f.column) for f in columns)
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor
        with raw.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                if json_at:
                    row = list(row)
                    for i in json_at:
                        row[i] = json.dumps(row[i])
                copy.write_row(row)
