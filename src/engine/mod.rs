//! The engine: the kernel families ([`family`]) and table ([`table`]), the launch arguments
//! ([`args`]), the launchers ([`launch`], [`batched`], [`aux`], [`ozaki`]) and how they enqueue
//! ([`enqueue`]: programmatic launches on sm_90), the plan for a shape
//! ([`plan`]) and the autotuner ([`tuner`]), over every element type.

pub(crate) mod args;
pub(crate) mod aux;
pub(crate) mod batched;
pub(crate) mod enqueue;
pub(crate) mod family;
pub(crate) mod launch;
pub(crate) mod ozaki;
pub(crate) mod plan;
pub(crate) mod table;
pub(crate) mod tuner;
