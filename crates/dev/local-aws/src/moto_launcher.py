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
#    of the items touched;
# 3. the same answers for less Python per item (moto 5.2.5 only; any other version runs
#    as shipped): moto parses each expression several times per item, deep-copies parse
#    trees the generic way, and serialises every attribute value of a response through
#    a generic model walker. See `_faster_moto` below: every patch keeps moto's own code
#    for everything it does not provably answer the same.
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


def _bounded_cache(limit=4096):
    """A dict that forgets everything once it holds `limit` entries (the keys are the
    distinct expressions a test run sends: dozens)."""
    cache = {}

    def get(key):
        return cache.get(key)

    def put(key, value):
        if len(cache) >= limit:
            cache.clear()
        cache[key] = value

    return get, put


def _faster_moto():
    import moto

    if moto.__version__ != "5.2.5":  # the code below was read against 5.2.5
        return
    import json

    from moto.dynamodb.comparisons import ConditionExpressionParser
    from moto.dynamodb.parsing import ast_nodes
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    # (a) Update expressions. moto parses the UpdateExpression of every item twice (the
    # handler's validation, then update_item), 25 tokenised and parsed copies of the
    # same string per 25-item transaction. The parse tree is a function of the string
    # alone (names and values are resolved later, on a copy), and every caller only
    # reads it: the handlers look up placeholders with find_clauses, update_item hands it
    # to UpdateExpressionValidator, which works on a deep copy. So one tree per distinct
    # string serves them all. A string that fails to parse is not cached: it raises as
    # before, every time.
    parse_update = UpdateExpressionParser.make.__func__
    update_get, update_put = _bounded_cache()

    def make(cls, expression_str):
        if type(expression_str) is not str:
            return parse_update(cls, expression_str)
        key = (cls, expression_str)
        tree = update_get(key)
        if tree is None:
            tree = parse_update(cls, expression_str)
            update_put(key, tree)
        return tree

    UpdateExpressionParser.make = classmethod(make)

    # (b) Condition expressions. Each item's ConditionExpression is lexed and parsed
    # three times in a transaction (handler validation, the transaction's check,
    # update_item's check) and twice in an UpdateItem. The result (an Op tree, plus the
    # placeholders it found, which the handlers check for unused names and values) is a
    # function of the expression, the ExpressionAttributeNames and the
    # ExpressionAttributeValues alone, so it is cached on all three, the maps in a
    # canonical form (sorted names; values as sorted JSON). The Op tree is never
    # mutated: its nodes set their fields in __init__ and `expr(item)` only reads them
    # (values it returns are strings or fresh objects). Failures (unknown placeholders,
    # syntax) are not cached and raise as before.
    parse_condition = ConditionExpressionParser.parse
    condition_get, condition_put = _bounded_cache()

    def condition_key(parser):
        try:
            names = parser.expression_attribute_names
            values = parser.expression_attribute_values
            key = (
                parser.condition_expression,
                None if names is None else tuple(sorted(names.items())),
                None if values is None else json.dumps(values, sort_keys=True),
            )
            hash(key)
            return key
        except (TypeError, ValueError, AttributeError):
            return None  # not canonicalisable: moto parses it

    def parse(self):
        if not self.condition_expression:
            return parse_condition(self)
        key = condition_key(self)
        hit = condition_get(key) if key is not None else None
        if hit is not None:
            op, names_found, values_found = hit
            self.expr_attr_names_found.extend(names_found)
            self.expr_attr_values_found.extend(values_found)
            return op
        names_before = len(self.expr_attr_names_found)
        values_before = len(self.expr_attr_values_found)
        op = parse_condition(self)
        if key is not None:
            condition_put(
                key,
                (
                    op,
                    tuple(self.expr_attr_names_found[names_before:]),
                    tuple(self.expr_attr_values_found[values_before:]),
                ),
            )
        return op

    ConditionExpressionParser.parse = parse

    # (c) Parse-tree copies. UpdateExpressionValidator deep-copies the tree once per
    # item, and the default deepcopy of a plain object goes through __reduce_ex__ and
    # copyreg for every node. This does what that protocol does for these nodes (no
    # __slots__, __getstate__, __setstate__ or __reduce__ anywhere in ast_nodes; their
    # attributes are `type`, a string, `children`, a list, and `parent`): a new instance
    # of the same class, registered in the memo before its attributes are copied (so
    # `parent` links resolve to the copies), then every attribute deep-copied in order.
    # Shortcuts, each what deepcopy itself would return: strings and None as they are
    # (immutable), lists element by element (registered in the memo, as deepcopy
    # does), an object already in the memo as its copy, a child node by this same
    # function. Anything else (a DynamoType, say) goes to copy.deepcopy.
    deepcopy = copy.deepcopy
    Node = ast_nodes.Node

    def copy_value(value, memo):
        kind = type(value)
        if kind is str or value is None:
            return value
        done = memo.get(id(value))
        if done is not None:
            return done
        if kind is list:
            copied = []
            memo[id(value)] = copied
            for element in value:
                copied.append(copy_value(element, memo))
            return copied
        if getattr(kind, "__deepcopy__", None) is node_deepcopy:
            return node_deepcopy(value, memo)
        return deepcopy(value, memo)

    def node_deepcopy(self, memo):
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        clone.__dict__.update(
            {name: copy_value(value, memo) for name, value in self.__dict__.items()}
        )
        return clone

    Node.__deepcopy__ = node_deepcopy

    # (e) Tree walks. Each of UpdateExpressionValidator's ten processors walks the whole
    # tree. At every node DepthFirstTraverser asks isinstance() of abstract classes
    # (ABCMeta's slow path) and rebuilds the processor's `_processing_map()` dict (twice
    # for a node it processes). Every `_processing_map` in moto returns a literal dict
    # of node classes to bound methods of the processor, the same on every call, so
    # each processor keeps the first one; and whether a node class is a Node, or is one
    # of a processor's classes, is a fact about the class (nothing registers virtual
    # subclasses), so it is kept per class. The walk itself is moto's, line for line:
    # children first (with the pre-processing hook), then the node, whose replacement
    # takes its place in its parent.
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser

    node_classes = {}

    def is_node(kind):
        known = node_classes.get(kind)
        if known is None:
            known = node_classes[kind] = issubclass(kind, Node)
        return known

    def processing_items(self):
        try:
            return self.__dict__["_launcher_processing_items"]
        except KeyError:
            items = tuple(self._processing_map().items())
            self.__dict__["_launcher_processing_items"] = items
            return items

    def nodes_to_be_processed(self):
        return tuple(k for k, _ in processing_items(self))

    def processor_for(self, kind):
        try:
            table = self.__dict__["_launcher_processor_for"]
        except KeyError:
            table = self.__dict__["_launcher_processor_for"] = {}
        try:
            return table[kind]
        except KeyError:
            name = None
            for class_key, _ in processing_items(self):
                if issubclass(kind, class_key):
                    name = class_key
                    break
            table[kind] = name
            return name

    def process(self, node):
        for class_key, processor in processing_items(self):
            if isinstance(node, class_key):
                return processor(node)

    plain_hook = DepthFirstTraverser.pre_processing_of_child

    def traverse_node_recursively(self, node, child_id=-1):
        # Two shortcuts, both no-ops in moto's walk: the pre-processing hook is not
        # called where the processor keeps DepthFirstTraverser's (which does nothing),
        # and a child that is not a Node (a string, a DynamoType) is not walked (the
        # walk returns a non-Node untouched).
        kind = type(node)
        known = node_classes.get(kind)
        if known is None:
            known = is_node(kind)
        if known:
            parent_node = node.parent
            if node.children is not None:
                hook = self.pre_processing_of_child
                if getattr(hook, "__func__", None) is plain_hook:
                    hook = None
                for i, child_node in enumerate(node.children):
                    if hook is not None:
                        hook(node, i)
                    child_kind = type(child_node)
                    child_known = node_classes.get(child_kind)
                    if child_known is None:
                        child_known = is_node(child_kind)
                    if child_known:
                        self.traverse_node_recursively(child_node, i)
            if processor_for(self, kind) is not None:
                node = self.process(node)
                node.parent = parent_node
                if parent_node:
                    parent_node.children[child_id] = node
        return node

    DepthFirstTraverser.nodes_to_be_processed = nodes_to_be_processed
    DepthFirstTraverser.process = process
    DepthFirstTraverser.traverse_node_recursively = traverse_node_recursively

    # (g) Item sizes. DynamoType.size() runs five type tests before it measures a
    # string or a number, and every attribute an update sets goes through
    # LimitedSizeDict.__setitem__, which sums the size of every key and value already
    # in the item (to refuse items over 405,000 bytes); queries measure every result
    # twice. The same numbers, term for term: a string (S) whose value is a str is
    # bytesize(value), a number (N) whose value is a str is len(str(value)), anything
    # else is measured by moto's size() as before; the item sum adds the same terms
    # without building the two lists first.
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models import dynamo_type

    DynamoType = dynamo_type.DynamoType
    bytesize = dynamo_type.bytesize
    moto_size = DynamoType.size

    def size(self):
        value = self.value
        if type(value) is str:
            kind = self.type
            if kind == "S":
                return len(value.encode("utf-8"))
            if kind == "N":
                return len(value)
        return moto_size(self)

    DynamoType.size = size

    def term(item):
        return item.size() if type(item) is DynamoType else bytesize(str(item))

    def limited_setitem(self, key, value):
        current_item_size = 0
        for k in self.keys():
            current_item_size += term(k)
        for v in self.values():
            current_item_size += term(v)
        new_item_size = bytesize(key) + term(value)
        if (current_item_size + new_item_size) > 405000:
            raise ItemSizeTooLarge
        dict.__setitem__(self, key, value)

    dynamo_type.LimitedSizeDict.__setitem__ = limited_setitem

    # (g2) Item copies. Queries deep-copy every result, updates deep-copy the item
    # they change. moto's Item.__deepcopy__ deep-copies the keys and each attribute
    # through copy.deepcopy, which dispatches to DynamoType.__deepcopy__; for a
    # DynamoType whose value is a str or a bool (every S, N, B-as-text, BOOL, NULL)
    # that copies `type` and `value` as they are (its list, map and set branches do
    # not apply). This does that directly, with the same memo (an object seen before
    # in this copy is its earlier copy); everything else goes to copy.deepcopy.
    Item = dynamo_type.Item
    LimitedSizeDict = dynamo_type.LimitedSizeDict

    def copy_attr(value, memo):
        done = memo.get(id(value))
        if done is not None:
            return done
        if type(value) is DynamoType:
            inner = value.value
            if type(inner) is str or type(inner) is bool:
                result = DynamoType.__new__(DynamoType)
                memo[id(value)] = result
                result.type = value.type
                result.value = inner
                return result
        return copy.deepcopy(value, memo)

    def item_deepcopy(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = self.__class__.__new__(self.__class__)
        memo[id(self)] = result
        result.hash_key = copy_attr(self.hash_key, memo)
        result.range_key = copy_attr(self.range_key, memo)
        attrs_copy = LimitedSizeDict.__new__(LimitedSizeDict)
        dict.__init__(attrs_copy)
        for key, value in self.attrs.items():
            dict.__setitem__(attrs_copy, key, copy_attr(value, memo))
        result.attrs = attrs_copy
        return result

    Item.__deepcopy__ = item_deepcopy

    # (h) Sorting items. Every query and scan sorts the whole table by its keys
    # (Table.all_items), and an index query sorts its matches again by the index keys
    # (Table.sorted_items), comparing DynamoType tuples: each comparison computes
    # `cast_value` on both sides through five type tests. Tuples compare element by
    # element with == and then <; for DynamoTypes of type S holding str values, == is
    # equality of the strings (same type) and < is the strings' order, so sorting by
    # the tuple of the strings gives the same order (and sort is stable, so equal keys,
    # which primary keys never are, keep their order too). When any key is not such a
    # string (numbers, binaries, a missing attribute, which raises), moto sorts.
    from moto.dynamodb.models.table import Table

    def all_strings(values):
        for v in values:
            if type(v) is not DynamoType or v.type != "S" or type(v.value) is not str:
                return False
        return True

    moto_all_items = Table.all_items

    def all_items(self):
        items = []
        for hash_set in self.items.values():
            if self.range_key_attr:
                for item in hash_set.values():
                    items.append(item)
            else:
                items.append(hash_set)
        ranged = [x.range_key for x in items if x.range_key]
        if len(ranged) == len(items) and all_strings(ranged):
            if all_strings(x.hash_key for x in items):
                return sorted(items, key=lambda x: (x.hash_key.value, x.range_key.value))
        elif not ranged and all_strings(x.hash_key for x in items):
            return sorted(items, key=lambda x: x.hash_key.value)
        return moto_all_items(self)

    Table.all_items = all_items
    moto_sorted_items = Table.sorted_items

    def sorted_items(self, hash_key_attrs, range_key_attrs, items):
        attrs_to_sort_by = self._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
        keys = []
        for x in items:
            attrs = x.attrs
            key = []
            for name in attrs_to_sort_by:
                v = attrs.get(name)
                if type(v) is not DynamoType or v.type != "S" or type(v.value) is not str:
                    return moto_sorted_items(self, hash_key_attrs, range_key_attrs, items)
                key.append(v.value)
            keys.append(tuple(key))
        order = sorted(range(len(items)), key=keys.__getitem__)
        items[:] = [items[i] for i in order]
        return items

    Table.sorted_items = sorted_items

    # (f) Checks of the expression alone. The first three of UpdateExpressionValidator's
    # processors (at most one SET/REMOVE/ADD clause, no overlapping paths, no key
    # attribute updated) read only the tree, the attribute names and the table's key
    # attributes, change nothing (each returns the node it was given) and run before
    # anything rewrites the copy. The count check alone is quadratic (it runs at every
    # node and searches the subtree below it), about a third of an item's validation.
    # Once they have passed for a tree from (a), the same names and the same key
    # attributes, they would pass again: they are skipped for it. The remaining seven
    # (values, the item's attributes, functions, operations, types) always run.
    import weakref

    from moto.dynamodb.parsing import validators

    static_checks = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    passed_static = weakref.WeakKeyDictionary()  # source tree -> {(names, key attrs)}
    Validator = validators.UpdateExpressionValidator
    validator_init = Validator.__init__

    def init(self, expression, *args, **kwargs):
        validator_init(self, expression, *args, **kwargs)
        self._launcher_source = expression

    def static_key(self):
        names = self.expression_attribute_names
        key_attrs = [
            tuple(p.table_key_attributes)
            for p in self.processors
            if type(p) is validators.UpdateHashRangeKeyValidator
        ]
        try:
            return (
                None if names is None else tuple(sorted(names.items())),
                tuple(key_attrs),
            )
        except TypeError:
            return None

    def validate(self):
        source = self._launcher_source
        key = static_key(self)
        try:
            skip = key is not None and key in passed_static.get(source, ())
        except TypeError:  # not weak-referenceable: never skipped
            source, skip = None, False
        n = self.node_to_validate
        for processor in self.processors:
            if skip and type(processor) in static_checks:
                continue
            n = processor.traverse(n)
        if not skip and key is not None and source is not None:
            passed_static.setdefault(source, set()).add(key)
        return n

    Validator.__init__ = init
    Validator.validate = validate

    # (d) Response attribute values. The JSON serializer finds each member of each
    # AttributeValue through a picker that tries about eight spellings and aliases per
    # member (10 members, each with its own lookups), about 2 ms of Python per item of a
    # query page. For an AttributeValue that is a dict with exactly one of the keys S,
    # N, BOOL, NULL, SS, NS, M, L, holding the JSON types moto stores there (str, str,
    # bool, bool, list of str, list of str, dict of such values, list of such values),
    # the walker's result is that same dict, rebuilt: no alias of another member is a
    # key of it, strings go through str(), booleans and maps as they are, and lists item
    # by item. Anything else (binary values, which the walker base64-encodes, an empty
    # or many-keyed dict, another type, a response transformer registered by some
    # service) takes moto's walker. tests: the adapter suites read every item back.
    from moto.core.serialize import JSONSerializer

    walk_structure = JSONSerializer._serialize_type_structure
    scalar = {"S": str, "N": str, "BOOL": bool, "NULL": bool}

    class NotPlain(Exception):
        pass

    def plain(value):
        if type(value) is not dict or len(value) != 1:
            raise NotPlain
        ((kind, inner),) = value.items()
        wanted = scalar.get(kind)
        if wanted is not None:
            if type(inner) is not wanted:
                raise NotPlain
            return {kind: inner}
        if kind in ("SS", "NS"):
            if type(inner) is not list or any(type(v) is not str for v in inner):
                raise NotPlain
            return {kind: list(inner)}
        if kind == "M":
            if type(inner) is not dict:
                raise NotPlain
            return {kind: {k: plain(v) for k, v in inner.items()}}
        if kind == "L":
            if type(inner) is not list:
                raise NotPlain
            return {kind: [plain(v) for v in inner]}
        raise NotPlain

    def serialize_structure(self, serialized, value, shape, key):
        if (
            key
            and shape.name == "AttributeValue"
            and type(value) is dict
            and not self._value_picker.response_transformers
            and self.operation_model.service_model.service_name == "dynamodb"
        ):
            try:
                result = plain(value)
            except NotPlain:
                pass
            else:
                self._default_serialize(serialized, result, shape, key)
                return
        walk_structure(self, serialized, value, shape, key)

    JSONSerializer._serialize_type_structure = serialize_structure

    # The same at the level of a whole item (a map of attribute names to
    # AttributeValues): the walker puts the map into its parent, then serialises each
    # value under its name (an AttributeValue shape has no serialization name, so the
    # name is the key). When every value is plain, as above, and every name is a
    # non-empty string, that is the map of plain copies; otherwise moto's walker.
    walk_map = JSONSerializer._serialize_type_map

    def serialize_map(self, serialized, value, shape, key):
        member = shape.value
        if (
            member.name == "AttributeValue"
            and type(value) is dict
            and not self._value_picker.response_transformers
            and self.operation_model.service_model.service_name == "dynamodb"
        ):
            try:
                result = {}
                for sub_key, sub_value in value.items():
                    if type(sub_key) is not str or not sub_key:
                        raise NotPlain
                    result[self.get_serialized_name(member, sub_key)] = plain(sub_value)
            except NotPlain:
                pass
            else:
                self._default_serialize(serialized, result, shape, key)
                return
        walk_map(self, serialized, value, shape, key)

    JSONSerializer._serialize_type_map = serialize_map

    # (i) Model objects to plain values. Every DynamoDB response goes through
    # dynamo_to_dict, which asks isinstance(datetime), isinstance(DynamoType) and
    # hasattr(to_json) of every value before recursing. For a DynamoType that is not
    # binary and holds a str or a bool, moto returns {type: value} (the value recurses
    # to itself); for a plain dict or list it recurses into the elements; strings,
    # numbers, booleans and None come back as they are. Everything else (binaries,
    # lists and maps inside DynamoTypes, model objects, datetimes, dict subclasses) goes
    # to moto's function, whose own recursion then comes back here.
    from moto.dynamodb import responses as dynamo_responses
    from moto.dynamodb.models import utilities

    moto_to_dict = utilities.dynamo_to_dict
    as_is = (str, int, float, bool, type(None))

    def to_dict(obj):
        kind = type(obj)
        if kind is DynamoType:
            value = obj.value
            if (type(value) is str or type(value) is bool) and obj.type not in ("B", "BS"):
                return {obj.type: value}
            return moto_to_dict(obj)
        if kind is dict:
            return {k: to_dict(v) for k, v in obj.items()}
        if kind is list:
            return [to_dict(v) for v in obj]
        if kind in as_is:
            return obj
        return moto_to_dict(obj)

    utilities.dynamo_to_dict = to_dict
    dynamo_responses.dynamo_to_dict = to_dict


_faster_moto()

from moto.server import main  # noqa: E402

main(sys.argv[1:])
