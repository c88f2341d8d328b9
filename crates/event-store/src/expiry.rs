//! How old copies leave the local store without scans: each shard has a
//! *horizon* (an arrival time, ms since the epoch) below which its copies
//! are no longer needed, and a fjall compaction filter removes every value
//! whose newest copy arrived before its shard's horizon as the LSM tree
//! compacts (`fjall::compaction::filter`; fjall runs the filter on every
//! item a compaction rewrites). A rewritten value also drops its copies
//! below the horizon ([`Tenants::keeps`]). Keys are written in epochs
//! (`epochs`), which seldom compact: most old copies leave with their
//! whole epoch, and this filter cleans what a compaction does rewrite.

use std::collections::HashMap;
use std::sync::Arc;

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};

use crate::codec;
use crate::tenants::Tenants;

/// The filter factory to install on each epoch's `copies` keyspace.
pub(crate) fn factory(tenants: &Tenants) -> Arc<dyn Factory> {
    Arc::new(ExpiryFactory {
        tenants: tenants.clone(),
    })
}

/// Makes one [`ExpiryFilter`] per compaction.
struct ExpiryFactory {
    tenants: Tenants,
}

impl Factory for ExpiryFactory {
    fn name(&self) -> &str {
        "shardsink-event-expiry"
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        // The horizons when the compaction starts: one set later applies to
        // the next compaction.
        Box::new(ExpiryFilter {
            horizons: self.tenants.horizons(),
        })
    }
}

/// Removes `copies` values whose newest copy is older than the horizon of
/// the key's tenant. `Remove` leaves a tombstone: a key is rewritten as
/// copies are added, so older versions may lie below.
struct ExpiryFilter {
    horizons: HashMap<u32, i64>,
}

impl CompactionFilter for ExpiryFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _: &Context) -> CompactionFilterResult {
        let Some(horizon) =
            codec::key_tenant(item.key()).and_then(|tenant| self.horizons.get(&tenant))
        else {
            return Ok(Verdict::Keep);
        };
        // A value that does not decode is kept: reads report it.
        Ok(match codec::newest_arrival(&item.value()?) {
            Some(newest) if !Tenants::keeps(Some(*horizon), newest) => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}
