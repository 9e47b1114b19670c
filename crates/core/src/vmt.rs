//! VMT merge of usage allocations by identical tag set (being written).
