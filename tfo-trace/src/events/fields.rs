//! The generator of [`super::Event`] and [`super::EventRef`]: the event's fields are
//! declared once, in the table `events/mod.rs` gives [`event_fields!`], and everything a
//! field is spelled in follows from its row: the owned event (its JSON), the reader's
//! borrowed view of a record, the decoding of the kernel's record into that view, and the
//! conversions between the two. A new field is the wire struct's (`TfoEvent` in
//! tfo-trace-common) plus one row.
//!
//! A row is one of three forms, each with its doc comment and, for the JSON, its `serde`
//! attributes:
//!
//! - `name: T = DECODE;` the same value in both: `T` is `Copy`, `DECODE` makes it from
//!   the record;
//! - `name: T, view vname: V = DECODE; event TO_EVENT; view TO_VIEW;` another type (or
//!   name) in the view: borrowed names where the event owns them, the time as a number;
//!   `TO_EVENT` makes the event's value from the view, `TO_VIEW` the view's from the event;
//! - `name: T, event only = TO_EVENT;` in the event only, made from the view's values (the
//!   names of a container, from the cgroup the reader named).
//!
//! The rows' expressions name their inputs with the identifiers the table's first line
//! gives (`decode(raw, at) event(r) view(e)`): the record and what decoding worked out of
//! it first, the view an event is made from, the event a view is made of.

/// See the module's doc.
macro_rules! event_fields {
    (
        $(#[$event_meta:meta])* struct Event;
        $(#[$view_meta:meta])* struct EventRef<$a:lifetime>;
        decode($raw:ident, $at:ident: $checked:ty) event($r:ident) view($e:ident);
        $($rows:tt)*
    ) => {
        $crate::events::fields::event_fields!(@row
            [$raw $at $r $e]
            {$(#[$event_meta])*} {$(#[$view_meta])*} [$a $checked]
            {} {} {} {} {}
            $($rows)*
        );
    };

    // In the event only.
    (@row [$raw:ident $at:ident $r:ident $e:ident] $em:tt $vm:tt $lt:tt
        {$($ev:tt)*} {$($vw:tt)*} {$($dec:tt)*} {$($to:tt)*} {$($of:tt)*}
        $(#[doc = $doc:literal])* $(#[serde $serde:tt])*
        $name:ident : $t:ty, event only = $to_event:expr;
        $($rest:tt)*
    ) => {
        $crate::events::fields::event_fields!(@row [$raw $at $r $e] $em $vm $lt
            {$($ev)* $(#[doc = $doc])* $(#[serde $serde])* pub $name: $t,}
            {$($vw)*}
            {$($dec)*}
            {$($to)* $name: $to_event,}
            {$($of)*}
            $($rest)*
        );
    };

    // Another type (or name) in the view.
    (@row [$raw:ident $at:ident $r:ident $e:ident] $em:tt $vm:tt $lt:tt
        {$($ev:tt)*} {$($vw:tt)*} {$($dec:tt)*} {$($to:tt)*} {$($of:tt)*}
        $(#[doc = $doc:literal])* $(#[serde $serde:tt])*
        $name:ident : $t:ty, view $vname:ident : $vt:ty = $decode:expr;
        event $to_event:expr; view $to_view:expr;
        $($rest:tt)*
    ) => {
        $crate::events::fields::event_fields!(@row [$raw $at $r $e] $em $vm $lt
            {$($ev)* $(#[doc = $doc])* $(#[serde $serde])* pub $name: $t,}
            {$($vw)* $(#[doc = $doc])* pub $vname: $vt,}
            {$($dec)* $vname: $decode,}
            {$($to)* $name: $to_event,}
            {$($of)* $vname: $to_view,}
            $($rest)*
        );
    };

    // The same value in both.
    (@row [$raw:ident $at:ident $r:ident $e:ident] $em:tt $vm:tt $lt:tt
        {$($ev:tt)*} {$($vw:tt)*} {$($dec:tt)*} {$($to:tt)*} {$($of:tt)*}
        $(#[doc = $doc:literal])* $(#[serde $serde:tt])*
        $name:ident : $t:ty = $decode:expr;
        $($rest:tt)*
    ) => {
        $crate::events::fields::event_fields!(@row [$raw $at $r $e] $em $vm $lt
            {$($ev)* $(#[doc = $doc])* $(#[serde $serde])* pub $name: $t,}
            {$($vw)* $(#[doc = $doc])* pub $name: $t,}
            {$($dec)* $name: $decode,}
            {$($to)* $name: $r.$name,}
            {$($of)* $name: $e.$name,}
            $($rest)*
        );
    };

    // Every row read: the two structs and the conversions.
    (@row [$raw:ident $at:ident $r:ident $e:ident] {$($em:tt)*} {$($vm:tt)*} [$a:lifetime $checked:ty]
        {$($ev:tt)*} {$($vw:tt)*} {$($dec:tt)*} {$($to:tt)*} {$($of:tt)*}
    ) => {
        $($em)*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct Event {
            $($ev)*
        }

        $($vm)*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct EventRef<$a> {
            $($vw)*
        }

        impl<$a> EventRef<$a> {
            /// The view of a record, from the record and what decoding checked and worked
            /// out of it first.
            fn of_record($raw: &TfoEvent, $at: $checked) -> Self {
                EventRef { $($dec)* }
            }

            /// The event, owned: its names shared, not copied.
            pub fn to_event(&self) -> Event {
                let $r = self;
                Event { $($to)* }
            }
        }

        impl Event {
            /// The event as `top`'s tables count it and `trace` prints it.
            pub fn view(&self) -> EventRef<'_> {
                let $e = self;
                EventRef { $($of)* }
            }
        }
    };
}
pub(crate) use event_fields;
