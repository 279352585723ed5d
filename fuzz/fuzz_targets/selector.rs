//! `labelSelector` query strings: any text parses or is refused, never panics.
#![no_main]

use std::collections::BTreeMap;

use joch_core::LabelSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(selector) = LabelSelector::parse(text) {
        let labels = BTreeMap::from([("app".to_owned(), "joch".to_owned())]);
        let _ = selector.matches(&labels);
    }
});
