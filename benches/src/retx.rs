//! Retransmissions counted from the frames on a wire, the same way for every TCP stack (the
//! loss benchmark feeds it what an `AF_PACKET` capture in the client's namespace sees). Per
//! sender, a data segment (one byte of TCP payload or more) whose start sequence lies below the
//! highest sequence end that sender already put on the wire counts as a retransmission.

/// One sender's data segments on the wire.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flow {
    /// Data segments seen.
    pub segments: u64,
    /// Of them, retransmissions (start below the highest end seen before).
    pub retransmitted: u64,
    /// Highest sequence end seen, once a data segment was.
    high: Option<u32>,
}

impl Flow {
    /// Counts a data segment of `len` bytes starting at `seq` (sequence numbers compare
    /// modulo 2^32, as TCP's do).
    pub fn data(&mut self, seq: u32, len: u32) {
        self.segments += 1;
        let end = seq.wrapping_add(len);
        match self.high {
            None => self.high = Some(end),
            Some(high) => {
                if (high.wrapping_sub(seq) as i32) > 0 {
                    self.retransmitted += 1;
                }
                if (end.wrapping_sub(high) as i32) > 0 {
                    self.high = Some(end);
                }
            }
        }
    }
}

/// What one capture counted for the connections of one service port.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Segments to the service port.
    pub client: Flow,
    /// Segments from the service port.
    pub server: Flow,
    /// Frames the capture lost (the kernel had no room for them): segments not counted.
    pub drops: u64,
}

impl Counts {
    /// Counts `frame` (an Ethernet frame's first bytes) if it is an IPv4 TCP segment to or
    /// from `port` with payload.
    pub fn frame(&mut self, frame: &[u8], port: u16) {
        let Some(ip) = frame.get(14..) else { return };
        if frame[12..14] != [0x08, 0x00] || ip.len() < 20 || ip[9] != 6 {
            return;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let Some(tcp) = ip.get(ihl..ihl + 14) else {
            return;
        };
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let doff = usize::from(tcp[12] >> 4) * 4;
        let Some(len) = total.checked_sub(ihl + doff).filter(|&l| l > 0) else {
            return;
        };
        let flow = if sport == port {
            &mut self.server
        } else if dport == port {
            &mut self.client
        } else {
            return;
        };
        flow.data(seq, len as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmissions_below_the_highest_end() {
        let mut f = Flow::default();
        f.data(1000, 100);
        f.data(1100, 100);
        f.data(1000, 100); // resent
        f.data(1150, 100); // overlaps the high end: resent too
        f.data(1250, 10);
        assert_eq!((f.segments, f.retransmitted), (5, 2));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut f = Flow::default();
        f.data(u32::MAX - 50, 100);
        f.data(49, 100);
        f.data(u32::MAX - 50, 100);
        assert_eq!((f.segments, f.retransmitted), (3, 1));
    }

    /// An Ethernet + IPv4 + TCP frame from `sport` to `dport` with `payload` bytes at `seq`.
    fn segment(sport: u16, dport: u16, seq: u32, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        ip[9] = 6;
        let tcp = &mut ip[20..];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        f
    }

    #[test]
    fn frames_count_per_sender_by_service_port() {
        let mut c = Counts::default();
        c.frame(&segment(40000, 9002, 1, 1000), 9002);
        c.frame(&segment(40000, 9002, 1, 1000), 9002);
        c.frame(&segment(9002, 40000, 7, 500), 9002);
        c.frame(&segment(9002, 40000, 7, 0), 9002); // a bare ACK
        c.frame(&segment(40000, 80, 1, 1000), 9002); // another service
                                                     // Ethernet padding after a short segment does not count as payload; headers cut short
                                                     // by the capture still count.
        let mut padded = segment(9002, 40000, 507, 2);
        padded.extend_from_slice(&[0; 4]);
        c.frame(&padded, 9002);
        c.frame(&segment(9002, 40000, 509, 1400)[..14 + 20 + 20 + 100], 9002);
        assert_eq!((c.client.segments, c.client.retransmitted), (2, 1));
        assert_eq!((c.server.segments, c.server.retransmitted), (3, 0));
    }
}
