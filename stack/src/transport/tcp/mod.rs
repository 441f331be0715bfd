//! zcnet's TCP, from a received segment to the one it sends back:
//!
//! * [`header`]: reads a received TCP header (options included) into a `TcpRepr`;
//! * [`input`]: ingress hands a checked segment to the connection that takes it, or answers
//!   it; [`chain`]: the same for a segment received over several slots (a large receive);
//! * [`output`]: egress asks the connections that are due for segments and writes their IP
//!   and Ethernet headers;
//! * [`table`]: the connection table (one place per socket slot), demultiplexing, kept
//!   deadlines;
//! * [`icmp_error`]: ICMP "fragmentation needed" / "packet too big" about a segment in flight
//!   lower its connection's path MTU;
//! * [`backlog`]: the listen backlog's ports and the tasks waiting for a free place;
//! * [`overflow`]: a SYN beyond a listener's backlog (answered with a SYN cookie) and the ACK
//!   that brings a cookie back; [`cookie`]: the cookies themselves;
//! * [`tcb`]: one connection's state machine, its timers, RTT, congestion control and loss
//!   recovery.

pub(crate) mod backlog;
pub(crate) mod chain;
pub(crate) mod cookie;
pub(crate) mod gro;
pub(crate) mod header;
pub(crate) mod icmp_error;
pub(crate) mod input;
pub(crate) mod output;
pub(crate) mod overflow;
pub(crate) mod table;
pub(crate) mod tcb;
