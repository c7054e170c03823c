//! Tests of the source store, the archive rules and git cloning.
