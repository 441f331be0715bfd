//! A byte reader for fuzz inputs: every read succeeds, past the end it yields zeros (and
//! [`Reader::is_empty`] tells the caller to stop), so any input decodes to some program.

/// Reads numbers and slices from a fuzz input, front to back.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, big endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, big endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next `n` bytes, or fewer at the end.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// A length-prefixed slice: one byte of length (at most `max`), then the bytes.
    pub fn short(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(self.u8()).min(max);
        self.bytes(n)
    }

    /// A length-prefixed slice: two bytes of length (at most `max`), then the bytes.
    pub fn long(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(self.u16()).min(max);
        self.bytes(n)
    }
}

/// Encodes inputs for [`Reader`] (the seed corpus is written with it).
#[derive(Debug, Default)]
pub struct Writer {
    /// The bytes so far.
    pub out: Vec<u8>,
}

impl Writer {
    /// Appends one byte.
    pub fn u8(&mut self, b: u8) -> &mut Self {
        self.out.push(b);
        self
    }

    /// Appends two bytes, big endian.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends four bytes, big endian.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// Appends a slice for [`Reader::short`] (at most 255 bytes).
    pub fn short(&mut self, b: &[u8]) -> &mut Self {
        let n = b.len().min(255);
        self.u8(n as u8).bytes(&b[..n])
    }

    /// Appends a slice for [`Reader::long`].
    pub fn long(&mut self, b: &[u8]) -> &mut Self {
        let n = b.len().min(usize::from(u16::MAX));
        self.u16(n as u16).bytes(&b[..n])
    }
}
