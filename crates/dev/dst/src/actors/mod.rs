//! The actors of a schedule, one file each: the seller ([`seller`]: its writer and its
//! service, through [`usage_api`] half the time; [`edge_seller`] across the edges of
//! time), the operator ([`operator`]; its over-bill [`corrections`], run last), Marketplace ([`marketplace`]), buyers
//! registering ([`register`]), and each function of the stacks: [`discoverer`],
//! [`aggregator`], [`cleanup`], [`submitter`], the events stack's [`lifecycle`]
//! functions, the agreement [`reconcile`]iation, the seller's service asking the entitlement answer ([`gatekeeper`]), [`outcome_events`] and [`buyer_events`]. Each runs the real handler or use case on a
//! [`crate::stack::Stack`]; [`crate::scenario`] sets them going.

pub mod aggregator;
pub mod buyer_events;
pub mod cleanup;
pub mod corrections;
pub mod discoverer;
pub mod edge_seller;
pub mod gatekeeper;
pub mod lifecycle;
pub mod marketplace;
pub mod operator;
pub mod outcome_events;
pub mod reconcile;
pub mod register;
pub mod seller;
pub mod submitter;
pub mod usage_api;
