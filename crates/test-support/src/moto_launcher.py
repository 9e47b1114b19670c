# The moto server our tests and the local stack run: moto's own server, plus
#
# 1. a watchdog: when the parent process dies by any means (even SIGKILL, where no
#    Drop runs) the stdin pipe closes and moto exits with it, so no emulator outlives
#    the test that started it;
# 2. transactions that cost what they cost on DynamoDB. moto 5.2 backs up every table a
#    TransactWriteItems names by deep-copying the whole table once per item, so one
#    25-item transaction against a 2,500-item table copies 62,500 items. DynamoDB's
#    cost depends on the items in the transaction, not on the table. Here the backup is
#    an undo journal of the items the transaction names, restored if it is cancelled:
#    the same all-or-nothing outcome (the store contract suite checks it), at the cost
#    of the items touched.
import copy
import os
import sys
import threading


def _exit_with_parent():
    try:
        sys.stdin.buffer.read()
    finally:
        os._exit(0)


threading.Thread(target=_exit_with_parent, daemon=True).start()


def _journaled_transactions():
    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    journaling = threading.local()

    def table_deepcopy(self, memo):
        # While this thread runs a journaled transaction, moto's whole-table backup is
        # the live table (the journal below does the backing up); otherwise a plain
        # deep copy, attribute by attribute.
        if getattr(journaling, "active", False):
            return self
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for name, value in self.__dict__.items():
            setattr(clone, name, copy.deepcopy(value, memo))
        return clone

    Table.__deepcopy__ = table_deepcopy
    moto_transact = models.DynamoDBBackend.transact_write_items

    def key_of(backend, op):
        if "Key" in op:
            return op["Key"]
        table = backend.get_table(op["TableName"])
        item = op.get("Item", {})
        names = [table.hash_key_attr, table.range_key_attr]
        return {n: item[n] for n in names if n and n in item}

    def journaled(self, transact_items):
        undo = []
        for entry in transact_items:
            for op in entry.values():
                name = op.get("TableName") if isinstance(op, dict) else None
                if not name or name not in self.tables:
                    continue
                try:
                    key = key_of(self, op)
                    before = self.get_item(name, key)
                except Exception:  # moto reports the bad request itself, below
                    continue
                attrs = copy.deepcopy(before.to_json()["Attributes"]) if before else None
                undo.append((name, key, attrs))
        journaling.active = True
        try:
            return moto_transact(self, transact_items)
        except BaseException:
            for name, key, attrs in reversed(undo):
                if attrs is None:
                    try:
                        self.delete_item(name, key)
                    except Exception:
                        pass
                else:
                    self.put_item(name, attrs)
            raise
        finally:
            journaling.active = False

    models.DynamoDBBackend.transact_write_items = journaled


_journaled_transactions()

from moto.server import main  # noqa: E402

main(sys.argv[1:])
