//! The SACK scoreboard: which bytes past the cumulative ACK the remote reported holding
//! (RFC 2018), and what loss recovery reads from it (RFC 6675): the holes between them, whether
//! a hole counts as lost, and how many bytes the reported blocks cover.
//!
//! Sequence numbers compare modulo 2³² (smoltcp's `TcpSeqNumber` ordering); every block kept
//! lies inside `(snd_una, snd_max]`, so comparisons never cross a wrap ambiguously.
//!
//! ```text
//!  snd_una                                                      highest SACKed byte
//!     │  hole      ┌─block─┐  hole  ┌──block──┐  ┌block┐            │   in flight (no news)
//!     ▼ ░░░░░░░░░░ █████████ ░░░░░░ ███████████  ███████ ............▼......................
//! ```
//!
//! A hole is *lost* ([`is_lost`](Scoreboard::is_lost)) when at least [`DUP_THRESH`] blocks, or
//! more than `(DUP_THRESH - 1) × MSS` SACKed bytes, lie above its start: the remote holds that
//! much data sent after it, so it is not merely late. Bytes past the highest SACKed byte are
//! never in a hole.
//!
//! Bounded: at most [`MAX_BLOCKS`] blocks are kept. When a new block would exceed that, the
//! highest block is forgotten: loss recovery works from the lowest holes, and a forgotten block
//! only makes the sender retransmit bytes the remote holds (never skip bytes it lacks).

use heapless::Vec;
use smoltcp::wire::TcpSeqNumber;

/// Duplicate ACKs (or their SACK equivalent) that signal a loss (RFC 5681, RFC 6675 DupThresh).
pub(crate) const DUP_THRESH: usize = 3;

/// Most SACKed blocks the scoreboard keeps.
pub(crate) const MAX_BLOCKS: usize = 8;

/// The SACKed blocks past the cumulative ACK (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Scoreboard {
    /// `[start, end)` ranges, sorted, disjoint and not touching, all above the cumulative ACK
    /// last passed to [`advance`](Self::advance) or [`record`](Self::record).
    blocks: Vec<(TcpSeqNumber, TcpSeqNumber), MAX_BLOCKS>,
}

impl Scoreboard {
    /// Forgets every block (an RTO after which the remote may have dropped what it held).
    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
    }

    /// Whether no block is recorded.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Drops what the cumulative ACK `una` now covers.
    pub(crate) fn advance(&mut self, una: TcpSeqNumber) {
        self.blocks.retain(|&(_, end)| end > una);
        if let Some(first) = self.blocks.first_mut() {
            if first.0 < una {
                first.0 = una;
            }
        }
    }

    /// Records the SACK blocks of an ACK whose cumulative ACK is `una`, for data sent up to
    /// `snd_max`. Blocks at or below `una` (D-SACK, RFC 2883), reaching past `snd_max`, or
    /// empty are ignored: they report nothing about the holes.
    pub(crate) fn record(
        &mut self,
        sack: &[Option<(u32, u32)>],
        una: TcpSeqNumber,
        snd_max: TcpSeqNumber,
    ) {
        self.advance(una);
        for &(left, right) in sack.iter().flatten() {
            let (start, end) = (TcpSeqNumber(left as i32), TcpSeqNumber(right as i32));
            if start >= end || start <= una || end > snd_max {
                continue;
            }
            self.insert(start, end);
        }
    }

    /// Adds `[start, end)`, merging it with the blocks it overlaps or touches.
    fn insert(&mut self, mut start: TcpSeqNumber, mut end: TcpSeqNumber) {
        // Blocks entirely before it stay; those it overlaps or touches merge into it.
        let first = self.blocks.iter().position(|&(_, e)| e >= start);
        let Some(first) = first else {
            self.push_or_forget(self.blocks.len(), (start, end));
            return;
        };
        let mut last = first;
        while last < self.blocks.len() && self.blocks[last].0 <= end {
            start = start.min(self.blocks[last].0);
            end = end.max(self.blocks[last].1);
            last += 1;
        }
        if last > first {
            self.blocks[first] = (start, end);
            for _ in first + 1..last {
                self.blocks.remove(first + 1);
            }
        } else {
            self.push_or_forget(first, (start, end));
        }
    }

    /// Inserts a block at `index`; when the scoreboard is full, the highest block (possibly
    /// the new one) is forgotten.
    fn push_or_forget(&mut self, index: usize, block: (TcpSeqNumber, TcpSeqNumber)) {
        if self.blocks.is_full() {
            if index >= self.blocks.len() {
                return;
            }
            self.blocks.pop();
        }
        // Room was made above: cannot fail.
        let _ = self.blocks.insert(index, block);
    }

    /// SACKed bytes, and blocks, lying above `seq`.
    fn above(&self, seq: TcpSeqNumber) -> (usize, usize) {
        self.blocks
            .iter()
            .filter(|&&(_, end)| end > seq)
            .fold((0, 0), |(bytes, blocks), &(start, end)| {
                (bytes + (end - start.max(seq)), blocks + 1)
            })
    }

    /// Whether the unSACKed byte `seq` counts as lost (RFC 6675 `IsLost`): [`DUP_THRESH`]
    /// blocks, or more than `(DUP_THRESH - 1) × mss` SACKed bytes, lie above it.
    pub(crate) fn is_lost(&self, seq: TcpSeqNumber, mss: usize) -> bool {
        let (bytes, blocks) = self.above(seq);
        blocks >= DUP_THRESH || bytes > (DUP_THRESH - 1) * mss
    }

    /// Total SACKed bytes.
    pub(crate) fn sacked_bytes(&self) -> usize {
        self.blocks.iter().map(|&(start, end)| end - start).sum()
    }

    /// If `seq` lies in a SACKed block, the block's end (where sending resumes).
    pub(crate) fn sacked_end(&self, seq: TcpSeqNumber) -> Option<TcpSeqNumber> {
        self.blocks
            .iter()
            .find(|&&(start, end)| start <= seq && seq < end)
            .map(|&(_, end)| end)
    }

    /// The first hole at or past `from` (its part from `from` on), with `una` the cumulative
    /// ACK: `[start, end)` below some SACKed block. `None` when no block lies past `from`.
    pub(crate) fn hole_from(
        &self,
        una: TcpSeqNumber,
        from: TcpSeqNumber,
    ) -> Option<(TcpSeqNumber, TcpSeqNumber)> {
        let mut hole_start = una;
        for &(start, end) in &self.blocks {
            if end <= from {
                hole_start = end;
                continue;
            }
            let s = hole_start.max(from);
            if s < start {
                return Some((s, start));
            }
            hole_start = end;
        }
        None
    }

    /// Bytes in holes at or past `from` that count as lost ([`is_lost`](Self::is_lost)): sent,
    /// not SACKed, and no longer in the network (RFC 6675's `pipe` leaves them out).
    pub(crate) fn lost_bytes(&self, una: TcpSeqNumber, from: TcpSeqNumber, mss: usize) -> usize {
        let mut total = 0;
        let mut at = from;
        while let Some((start, end)) = self.hole_from(una, at) {
            if self.is_lost(start, mss) {
                total += end - start;
            }
            at = end;
        }
        total
    }
}

/// Whether the first SACK block of an ACK whose cumulative ACK is `una` is a D-SACK (RFC 2883):
/// the remote reports a segment it received twice. It is one when it starts below the
/// cumulative ACK, or lies within the second block (a duplicate of data held past a hole).
pub(crate) fn is_dsack(sack: &[Option<(u32, u32)>], una: TcpSeqNumber) -> bool {
    let Some(&Some((left, right))) = sack.first() else {
        return false;
    };
    let (start, end) = (TcpSeqNumber(left as i32), TcpSeqNumber(right as i32));
    if start >= end {
        return false;
    }
    if start < una {
        return true;
    }
    match sack.get(1) {
        Some(&Some((left2, right2))) => {
            TcpSeqNumber(left2 as i32) <= start && end <= TcpSeqNumber(right2 as i32)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    fn seq(n: i32) -> TcpSeqNumber {
        TcpSeqNumber(n)
    }

    fn board(blocks: &[(u32, u32)], una: i32, max: i32) -> Scoreboard {
        let mut sb = Scoreboard::default();
        for &b in blocks {
            sb.record(&[Some(b)], seq(una), seq(max));
        }
        sb
    }

    #[test]
    fn blocks_merge_and_stay_sorted() {
        let sb = board(&[(300, 400), (100, 200), (200, 250), (390, 500)], 0, 1000);
        assert_eq!(
            sb.blocks.as_slice(),
            &[(seq(100), seq(250)), (seq(300), seq(500))]
        );
        assert_eq!(sb.sacked_bytes(), 350);
        // One block bridging both.
        let mut sb = sb;
        sb.record(&[Some((240, 310))], seq(0), seq(1000));
        assert_eq!(sb.blocks.as_slice(), &[(seq(100), seq(500))]);
    }

    #[test]
    fn dsacks_are_told_from_sack_blocks() {
        // Below the cumulative ACK (all of it, or its start: Linux's test too).
        assert!(is_dsack(&[Some((100, 200)), None, None], seq(300)));
        assert!(is_dsack(&[Some((250, 350)), None, None], seq(300)));
        // Inside the second block: a duplicate of data held past a hole.
        assert!(is_dsack(
            &[Some((500, 600)), Some((400, 800)), None],
            seq(300)
        ));
        // Ordinary SACK blocks, empty and malformed ones.
        assert!(!is_dsack(&[Some((400, 500)), None, None], seq(300)));
        assert!(!is_dsack(
            &[Some((400, 500)), Some((600, 700)), None],
            seq(300)
        ));
        assert!(!is_dsack(
            &[Some((500, 900)), Some((400, 800)), None],
            seq(300)
        ));
        assert!(!is_dsack(&[Some((200, 200)), None, None], seq(300)));
        assert!(!is_dsack(&[None, None, None], seq(300)));
        assert!(!is_dsack(&[], seq(300)));
        // Across the wrap of sequence numbers.
        assert!(is_dsack(&[Some((u32::MAX - 99, 50)), None, None], seq(100)));
    }

    #[test]
    fn blocks_outside_the_flight_are_ignored() {
        // D-SACK below the cumulative ACK, past what was sent, empty.
        let sb = board(&[(50, 100), (900, 1100), (300, 300)], 100, 1000);
        assert!(sb.is_empty());
    }

    #[test]
    fn the_cumulative_ack_trims_blocks() {
        let mut sb = board(&[(100, 200), (300, 400)], 0, 1000);
        sb.advance(seq(150));
        assert_eq!(
            sb.blocks.as_slice(),
            &[(seq(150), seq(200)), (seq(300), seq(400))]
        );
        sb.advance(seq(350));
        assert_eq!(sb.blocks.as_slice(), &[(seq(350), seq(400))]);
        sb.advance(seq(400));
        assert!(sb.is_empty());
    }

    #[test]
    fn holes_and_losses_follow_rfc_6675() {
        // MSS 100: segments 0..1000, segment 0 and 300 lost.
        let sb = board(&[(100, 300), (400, 700)], 0, 1000);
        assert_eq!(sb.hole_from(seq(0), seq(0)), Some((seq(0), seq(100))));
        assert_eq!(sb.hole_from(seq(0), seq(50)), Some((seq(50), seq(100))));
        assert_eq!(sb.hole_from(seq(0), seq(100)), Some((seq(300), seq(400))));
        assert_eq!(sb.hole_from(seq(0), seq(400)), None);
        // 500 bytes above 0 (> 2 MSS): lost; 300 bytes above 300 (> 200): lost.
        assert!(sb.is_lost(seq(0), 100));
        assert!(sb.is_lost(seq(300), 100));
        // With an MSS of 200, 300 bytes in one block above 300 are not enough.
        assert!(!sb.is_lost(seq(300), 200));
        assert_eq!(sb.lost_bytes(seq(0), seq(0), 100), 200);
        assert_eq!(sb.lost_bytes(seq(0), seq(0), 200), 100);
        assert_eq!(sb.lost_bytes(seq(0), seq(100), 100), 100);
        // Three small blocks above a byte make it lost, whatever their size.
        let sb = board(&[(10, 11), (20, 21), (30, 31)], 0, 1000);
        assert!(sb.is_lost(seq(0), 1460));
        assert!(!sb.is_lost(seq(15), 1460));
    }

    #[test]
    fn sacked_end_skips_a_block() {
        let sb = board(&[(100, 300)], 0, 1000);
        assert_eq!(sb.sacked_end(seq(100)), Some(seq(300)));
        assert_eq!(sb.sacked_end(seq(299)), Some(seq(300)));
        assert_eq!(sb.sacked_end(seq(300)), None);
        assert_eq!(sb.sacked_end(seq(99)), None);
    }

    #[test]
    fn a_full_scoreboard_forgets_the_highest_block() {
        let blocks: std::vec::Vec<(u32, u32)> = (0..MAX_BLOCKS as u32 + 2)
            .map(|i| (100 * i + 10, 100 * i + 20))
            .collect();
        let sb = board(&blocks, 0, 10_000);
        assert_eq!(sb.blocks.len(), MAX_BLOCKS);
        assert_eq!(sb.blocks[0], (seq(10), seq(20)));
        assert_eq!(
            sb.blocks[MAX_BLOCKS - 1],
            (
                seq(100 * (MAX_BLOCKS as i32 - 1) + 10),
                seq(100 * (MAX_BLOCKS as i32 - 1) + 20)
            )
        );
        // A lower block still finds room: the highest goes.
        let mut sb = sb;
        sb.record(&[Some((1, 5))], seq(0), seq(10_000));
        assert_eq!(sb.blocks[0], (seq(1), seq(5)));
        assert_eq!(sb.blocks.len(), MAX_BLOCKS);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let base = i32::MAX - 150;
        let sb = board(
            &[((base + 100) as u32, (i64::from(base) + 300) as u32)],
            base,
            base.wrapping_add(1000),
        );
        assert_eq!(sb.sacked_bytes(), 200);
        assert_eq!(
            sb.hole_from(seq(base), seq(base)),
            Some((seq(base), seq(base + 100)))
        );
    }
}
