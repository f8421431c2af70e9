//! Model modules as plugins: each module (network, memory, ipcq, exec,
//! traffic, trace, stats) registers its resources, its systems in their
//! [`Stage`](crate::Stage) and, if it keeps a calendar, when it next has
//! work. The engine builds a world by running every plugin; `advance` asks
//! the [`Calendars`] registry for the next due tick instead of knowing each
//! module's calendar.

use crate::time::Tick;
use bevy_ecs::prelude::*;

/// What a model module adds to a world and its tick schedule (the shape of
/// a bevy `Plugin`, without bevy_app).
pub trait Plugin {
    fn build(&self, world: &mut World, schedule: &mut Schedule);
}

/// When a module next has work, seen at tick `now`: `Some(now)` if work was
/// left for this tick, the earliest tick of its calendar, or None.
pub type NextDue = fn(&World, Tick) -> Option<Tick>;

/// Every module's [`NextDue`], registered by its plugin.
#[derive(Resource, Default)]
pub struct Calendars {
    all: Vec<NextDue>,
    /// Which of them is the network's: the engine runs ahead on ticks where
    /// only packets move (see `Engine::step`).
    network: Option<usize>,
}

impl Calendars {
    pub fn register(&mut self, next: NextDue) {
        self.all.push(next);
    }

    /// The earliest tick at which any module has work.
    pub fn next(&self, world: &World, now: Tick) -> Option<Tick> {
        self.all.iter().filter_map(|f| f(world, now)).min()
    }

    /// The earliest tick at which a module other than the network has work.
    pub fn next_besides_network(&self, world: &World, now: Tick) -> Option<Tick> {
        self.all
            .iter()
            .enumerate()
            .filter(|&(k, _)| Some(k) != self.network)
            .filter_map(|(_, f)| f(world, now))
            .min()
    }
}

/// Registers `next` in the world's [`Calendars`].
pub fn register_calendar(world: &mut World, next: NextDue) {
    world.get_resource_or_init::<Calendars>().register(next);
}

/// Registers the network module's `next` (see [`Calendars::next_besides_network`]).
pub fn register_network_calendar(world: &mut World, next: NextDue) {
    let mut c = world.get_resource_or_init::<Calendars>();
    c.network = Some(c.all.len());
    c.register(next);
}

/// True when a calendar's next tick has come.
pub fn due(next: Option<Tick>, now: Tick) -> bool {
    next.is_some_and(|t| t <= now)
}
