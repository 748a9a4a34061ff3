//! Reading an image's metadata at open and deciding its zone state: the two durable
//! tables and the live table, each checked under the image's identity (the superblock
//! copies, which hold it, are read first: `superblocks`), parts of another image
//! named, and the newest state some copy proves (see `docs/images.md`, "How an open
//! decides").

use super::format::{self, Entry, ImageId, Layout, LiveHeader, LiveState, Table, TableRead};
use super::media::Media;
use std::io;
use zblk_core::geometry::Geometry;
use zblk_core::units::ZoneNo;
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneSet};

/// What opening found: the tables as read, and the commit the superblocks witness.
pub(super) struct Found {
    tables: [TableRead; 2],
    live: LiveHeader,
    live_entries: Result<Vec<Entry>, String>,
    /// Whether the live entries are those the last clean close left (the header's
    /// digest of them matches); `None` when the header records no digest.
    live_digest_ok: Option<bool>,
    /// The newest commit a valid superblock copy witnesses.
    sb_commit: u64,
    /// The live table's witness, if it checks out.
    live_witness: Option<format::LiveWitness>,
    /// The parts found to be another image's, named ([`other_image_parts`]).
    other_image: Vec<String>,
}

impl Found {
    /// How many parts of the metadata check out: durable tables (valid or torn), the
    /// live header, the live witness. Under another image's identity, none does.
    pub(super) fn parts_checking_out(&self) -> usize {
        let tables = self.tables.iter().filter(|t| matches!(t, TableRead::Valid(_) | TableRead::Torn { .. })).count();
        tables + usize::from(self.live.commit.is_some()) + usize::from(self.live_witness.is_some())
    }

    /// Names one more part of another image (a superblock copy).
    pub(super) fn note_other_image(&mut self, what: String) {
        self.other_image.insert(0, what);
    }
}

/// Reads the durable tables and the live table of image `id`; `sb_commit` is what the
/// superblocks witness.
pub(super) fn read_tables(
    media: &dyn Media,
    geo: &Geometry,
    layout: &Layout,
    sb_commit: u64,
    id: ImageId,
) -> io::Result<Found> {
    let mut buf = vec![0u8; layout.table_bytes as usize];
    let mut read = |off: u64| -> io::Result<Vec<u8>> {
        media.read_at(&mut buf, off)?;
        Ok(buf.clone())
    };
    let a = read(layout.table_offset[0])?;
    let b = read(layout.table_offset[1])?;
    let live = read(layout.live_offset)?;
    let hdr = LiveHeader::decode(&live, id);
    let live_digest_ok = match (hdr.digest, hdr.commit) {
        (Some(d), Some(c)) => Some(d == format::live_digest(&live, c, geo.nr_zones(), id)),
        _ => None,
    };
    let tables = [Table::read(&a, geo.nr_zones(), id), Table::read(&b, geo.nr_zones(), id)];
    let other_image = other_image_parts(&tables, &hdr, &live, geo.nr_zones(), id);
    Ok(Found {
        tables,
        live: hdr,
        live_entries: format::decode_live_entries(&live, geo.nr_zones(), id),
        live_digest_ok,
        sb_commit,
        live_witness: format::live_witness(&live, id),
        other_image,
    })
}

/// The parts of the metadata that are another image's (copied in from an image of
/// the same geometry), named: a durable table with sectors carrying another
/// identity, a live header or witness of another image, and then the live entries
/// that fail their checks (another image's entries fail them in this one). Entries
/// that fail with no other part of the live table another image's are damage, told
/// as such elsewhere.
fn other_image_parts(tables: &[TableRead], hdr: &LiveHeader, live: &[u8], nr_zones: u32, id: ImageId) -> Vec<String> {
    let mut found = Vec::new();
    for (slot, t) in tables.iter().enumerate() {
        if let TableRead::Damaged { other_image: Some(which), .. } = t {
            found.push(format!("durable zone table {} ({which})", slot_name(slot)));
        }
    }
    let witness = format::live_witness_of_another_image(live, id);
    if hdr.other_image {
        found.push("the live header".to_string());
    }
    if witness {
        found.push("the live table's last sector (its witness)".to_string());
    }
    let failing = format::failing_live_entries(live, nr_zones, id);
    let format2 = |z: &u32| {
        let at = format::entry_offset(ZoneNo(*z));
        let word = u64::from_le_bytes(live[at..at + 8].try_into().expect("8 bytes"));
        !id.is_none() && Entry::unpack(word, ZoneNo(*z), ImageId::NONE).is_ok()
    };
    if !failing.is_empty() && (hdr.other_image || witness || failing.iter().any(format2)) {
        let list: Vec<String> = failing.iter().take(8).map(u32::to_string).collect();
        let more = if failing.len() > 8 { format!(" and {} more", failing.len() - 8) } else { String::new() };
        found.push(format!(
            "the live entries of zone{} {}{more}",
            if failing.len() > 1 { "s" } else { "" },
            list.join(", ")
        ));
    }
    found
}

/// What recovery decided.
pub(super) struct Recovery {
    pub(super) entries: Vec<Entry>,
    pub(super) repairs: Vec<String>,
    /// The image was not closed cleanly: punch past the write pointers.
    pub(super) unclean: bool,
    /// A durable table was unusable, or the tables do not hold the state taken
    /// (or its copies contradicted each other): both are rewritten.
    pub(super) bad_table: bool,
    pub(super) durable_seq: u64,
    pub(super) durable_slot: usize,
    pub(super) durable_entries: Vec<Entry>,
    /// The state chosen cannot be proven as new as the last commit: what may be
    /// lost. Opening for writing is refused unless the caller accepts it.
    pub(super) at_risk: Option<String>,
}

fn slot_name(slot: usize) -> char {
    if slot == 0 { 'A' } else { 'B' }
}

/// Whether `entries` describe a possible state of `geo`'s zones; names the first
/// impossible one.
pub(crate) fn check_entries(geo: &Geometry, entries: &[Entry]) -> Result<(), String> {
    if !geo.is_zoned() {
        return if entries.is_empty() { Ok(()) } else { Err("zone entries on a regular device".to_string()) };
    }
    if entries.len() != geo.nr_zones() as usize {
        return Err(format!("{} zone entries, the geometry has {} zones", entries.len(), geo.nr_zones()));
    }
    let lbs = u64::from(geo.lbs_sectors());
    let infos: Vec<ZoneInfo> = entries.iter().enumerate().map(|(z, e)| e.info(geo, ZoneNo(z as u32))).collect();
    for (z, (e, i)) in entries.iter().zip(&infos).enumerate() {
        if e.wp_offset > i.len {
            return Err(format!("zone {z}: write pointer offset {:#x} past the zone length {:#x}", e.wp_offset, i.len));
        }
        if geo.zone_is_conv(ZoneNo(z as u32)) != (e.cond == ZoneCond::NotWp) {
            return Err(format!("zone {z}: condition {} does not fit the zone type", e.cond));
        }
        if e.cond == ZoneCond::NotWp && e.wp_offset != 0 {
            return Err(format!("zone {z}: a conventional zone with a write pointer ({:#x})", e.wp_offset));
        }
        if e.wp_offset % lbs != 0 {
            return Err(format!(
                "zone {z}: write pointer offset {:#x} is not on a {}-byte logical block",
                e.wp_offset,
                geo.lbs_bytes()
            ));
        }
        if e.cond == ZoneCond::Full && e.wp_offset != i.capacity && e.wp_offset != i.len {
            return Err(format!(
                "zone {z}: FULL with write pointer offset {:#x}, neither its capacity {:#x} nor its length {:#x}",
                e.wp_offset, i.capacity, i.len
            ));
        }
        if matches!(e.cond, ZoneCond::ImpOpen | ZoneCond::ExpOpen | ZoneCond::Closed) && e.wp_offset > i.capacity {
            return Err(format!("zone {z}: {} with write pointer offset {:#x} past its capacity", e.cond, e.wp_offset));
        }
    }
    let count = |f: &dyn Fn(ZoneCond) -> bool| entries.iter().filter(|e| f(e.cond)).count() as u32;
    let open = count(&|c| matches!(c, ZoneCond::ImpOpen | ZoneCond::ExpOpen));
    let active = open + count(&|c| c == ZoneCond::Closed);
    if geo.max_open() != 0 && open > geo.max_open() {
        return Err(format!("{open} open zones, more than the limit max_open={}", geo.max_open()));
    }
    if geo.max_active() != 0 && active > geo.max_active() {
        return Err(format!("{active} active zones, more than the limit max_active={}", geo.max_active()));
    }
    ZoneSet::from_zones(geo, &infos).map(|_| ())
}

/// Decides the zone state of an image from every copy of it (see the module
/// documentation), and what to say about it.
///
/// The newest commit any copy proves happened is `known`: a valid table's number, a
/// damaged table's (its good sectors still carry it), the superblocks' and the live
/// table's witnesses, the live header's. The state taken must be at least that new:
/// the live table when it is trusted (same boot, or a clean close) and names
/// `known`, else the newest valid durable table when it is `known`. Otherwise the
/// state is older than a commit that happened: flushed writes, resets or finishes
/// may be undone, and `at_risk` says which. So it says too when the copies
/// contradict each other in a way no crash or power cut leaves them
/// ([`contradictions`]): a part copied back from an older image, or writes a disk
/// acknowledged and lost, may hide a newer commit from every copy left.
pub(super) fn recover(geo: &Geometry, found: Found, boot: &[u8; 36]) -> Result<Recovery, String> {
    let ev = Evidence::gather(geo, found, boot);
    let mut repairs = Vec::new();
    let newest = newest_valid(&ev.tables);
    let valid_seq = newest.map(|(_, t)| t.seq);
    let trusted_live = ev.trusted_live(valid_seq, &mut repairs);
    ev.describe_damaged_tables(newest.is_some(), trusted_live.is_some(), valid_seq, &mut repairs);
    let unclean = ev.hdr.state != LiveState::Clean;
    let mut choice = match (&trusted_live, newest) {
        (Some(live), _) => ev.take_live(live, newest, &mut repairs),
        (None, Some((slot, t))) => ev.take_table(geo, slot, t, &mut repairs),
        (None, None) => return Err(ev.nothing_usable()),
    };
    if !ev.other_image.is_empty() {
        choice.at_risk = Some(ev.other_image_risk(&choice));
    }
    if unclean && geo.is_zoned() {
        repairs.push("data past every write pointer discarded".to_string());
    }
    // Both tables are rewritten when they do not hold the state taken. A state taken
    // despite a risk (accepted) is written afresh too, so that the next open finds
    // every copy agreeing.
    let bad_table = !ev.contra.is_empty()
        || choice.rewrite
        || choice.at_risk.is_some()
        || ev.tables.iter().any(|t| !matches!(t, TableRead::Valid(_)));
    Ok(Recovery {
        entries: choice.entries,
        repairs,
        unclean,
        bad_table,
        durable_seq: choice.durable_seq,
        durable_slot: choice.durable_slot,
        durable_entries: choice.durable_entries,
        at_risk: choice.at_risk,
    })
}

/// The newest valid durable table and its slot.
fn newest_valid(tables: &[TableRead]) -> Option<(usize, &Table)> {
    (0..2)
        .filter_map(|s| match &tables[s] {
            TableRead::Valid(t) => Some((s, t)),
            _ => None,
        })
        .max_by_key(|(_, t)| t.seq)
}

/// The commit numbers the copies claim or prove.
struct Commits {
    /// The newest commit any copy proves happened: the state taken must be as new.
    known: u64,
    /// The newest commit a table or a witness claims (the live header aside).
    claims: u64,
    /// The highest commit number seen anywhere: new tables are numbered from it.
    highest: u64,
    /// A durable table is damaged beyond telling which commit it held.
    unknown_damage: bool,
}

impl Commits {
    fn of(
        tables: &[TableRead],
        hdr: &LiveHeader,
        sb_commit: u64,
        live_witness: Option<format::LiveWitness>,
    ) -> Commits {
        // The superblocks and the live table's witness name a commit once its table
        // was synced: it completed.
        let witness = sb_commit.max(live_witness.map_or(0, |w| w.completed));
        let mut known = newest_valid(tables).map_or(0, |(_, t)| t.seq).max(witness);
        let mut unknown_damage = false;
        for t in tables {
            match t {
                TableRead::Damaged { seq: Some(s), .. } => known = known.max(*s),
                TableRead::Damaged { seq: None, .. } => unknown_damage = true,
                _ => {}
            }
        }
        // Tables and witnesses claim commits; the live header announces a commit
        // before its table is written, so every commit below the one it names is
        // complete (at a clean close, the one it names too).
        let claims = known;
        if let Some(c) = hdr.commit {
            let complete = hdr.state == LiveState::Clean
                || zblk_core::mutation::on(zblk_core::mutation::Mutation::AnnouncedAsComplete);
            known = known.max(if complete { c } else { c.saturating_sub(1) });
        }
        // New tables are numbered above every number seen, so that a later torn write
        // never mixes two tables of the same number.
        let highest = tables
            .iter()
            .filter_map(|t| match t {
                TableRead::Torn { seqs } => Some(seqs.1),
                t => t.claimed_seq(),
            })
            .chain(hdr.commit)
            .chain([witness])
            .max()
            .unwrap_or(0);
        Commits { known, claims, highest, unknown_damage }
    }
}

/// Every copy of the zone state as read and checked: what [`recover`] decides from.
struct Evidence {
    /// The durable tables; one whose zone state is impossible counts as damaged.
    tables: Vec<TableRead>,
    hdr: LiveHeader,
    /// The live entries, if they describe a possible zone state.
    live: Result<Vec<Entry>, String>,
    live_digest_ok: Option<bool>,
    /// The live table was live in this boot (the page cache still holds it).
    same_boot: bool,
    /// How the copies contradict each other ([`contradictions`]).
    contra: Vec<String>,
    commits: Commits,
    /// The parts that are another image's, named.
    other_image: Vec<String>,
}

/// The state [`recover`] takes, and the durable table the device goes on from.
struct Choice {
    entries: Vec<Entry>,
    durable_seq: u64,
    durable_slot: usize,
    durable_entries: Vec<Entry>,
    /// What may be lost (see [`Recovery::at_risk`]).
    at_risk: Option<String>,
    /// Both durable tables are rewritten from the state taken.
    rewrite: bool,
    /// The state's commit and where it comes from, in words ("commit 7, from durable
    /// table A").
    source: String,
}

impl Evidence {
    fn gather(geo: &Geometry, found: Found, boot: &[u8; 36]) -> Evidence {
        // A table whose zone state is impossible is damaged too; its number stays known.
        let tables: Vec<TableRead> = found
            .tables
            .into_iter()
            .map(|t| match t {
                TableRead::Valid(t) => match check_entries(geo, &t.entries) {
                    Ok(()) => TableRead::Valid(t),
                    Err(e) => TableRead::Damaged {
                        seq: Some(t.seq),
                        why: format!("impossible zone state: {e}"),
                        other_image: None,
                    },
                },
                other => other,
            })
            .collect();
        let hdr = found.live;
        let commits = Commits::of(&tables, &hdr, found.sb_commit, found.live_witness);
        let same_boot = *boot != [0; 36] && hdr.boot_id == *boot;
        let live = found.live_entries.and_then(|e| check_entries(geo, &e).map(|()| e));
        let contra =
            contradictions(&tables, &hdr, found.sb_commit, found.live_witness, found.live_digest_ok, &live, same_boot);
        let other_image = found.other_image;
        Evidence { tables, hdr, live, live_digest_ok: found.live_digest_ok, same_boot, contra, commits, other_image }
    }

    /// The live entries when they are the state: trusted (live in this boot, or left
    /// by a clean close) and having seen every commit claimed; never when any copy
    /// contradicts another. Says so when this boot's live table is unusable.
    fn trusted_live(&self, valid_seq: Option<u64>, repairs: &mut Vec<String>) -> Option<Vec<Entry>> {
        let claims = self.commits.claims;
        match (&self.live, self.hdr.state, self.hdr.commit) {
            _ if !self.contra.is_empty() => None,
            (Ok(e), LiveState::Live, Some(c)) if self.same_boot && c >= claims => Some(e.clone()),
            (Ok(e), LiveState::Clean, Some(c)) if c >= claims && valid_seq != Some(c) => Some(e.clone()),
            (Err(why), LiveState::Live, Some(_)) if self.same_boot => {
                repairs.push(format!("live zone table unusable ({why}): write pointers from the last commit"));
                None
            }
            _ => None,
        }
    }

    /// Says which durable table is torn or damaged and rewritten, when another copy
    /// (`newest_ok`: the other table; `from_live`: the live table) holds the state.
    fn describe_damaged_tables(
        &self,
        newest_ok: bool,
        from_live: bool,
        valid_seq: Option<u64>,
        repairs: &mut Vec<String>,
    ) {
        let other_ok = newest_ok || from_live;
        let source = if from_live && valid_seq < Some(self.commits.known) { "live table" } else { "other copy" };
        for (slot, t) in self.tables.iter().enumerate() {
            match t {
                TableRead::Valid(_) => {}
                TableRead::Torn { seqs } if other_ok => repairs.push(format!(
                    "durable zone table {}: torn write of commit {} (a power cut during a commit, which was never \
                     acknowledged); rewritten",
                    slot_name(slot),
                    seqs.1
                )),
                TableRead::Damaged { seq, why, .. } if other_ok => repairs.push(format!(
                    "durable zone table {}: {why}{}; rewritten from the {source}",
                    slot_name(slot),
                    seq.map_or(String::new(), |s| format!(" (it held commit {s})")),
                )),
                _ => {}
            }
        }
    }

    /// The trusted live table's state. Durable tables are rebuilt from it, numbered
    /// past every commit known; the slot of the newest valid table (if any) is kept so
    /// that the damaged one is written first.
    fn take_live(&self, live: &[Entry], newest: Option<(usize, &Table)>, repairs: &mut Vec<String>) -> Choice {
        let slot = newest.map_or(1, |(s, _)| s);
        let durable = newest.map_or_else(|| live.to_vec(), |(_, t)| t.entries.clone());
        let clean = self.hdr.state == LiveState::Clean;
        if clean {
            repairs.push(format!(
                "commit {} has no valid durable table: zone state taken from the live table, which the clean \
                 close left equal to it{}",
                self.commits.known,
                if self.live_digest_ok == Some(true) { " (its entries match the digest the close stored)" } else { "" }
            ));
        } else {
            repairs.push(
                "not closed cleanly (the process using it stopped): write pointers taken from the live zone table, \
                 which every completed write updated"
                    .to_string(),
            );
        }
        Choice {
            entries: live.to_vec(),
            durable_seq: self.commits.highest,
            durable_slot: slot,
            durable_entries: durable,
            at_risk: None,
            rewrite: clean,
            source: format!("commit {}, from the live table", self.hdr.commit.unwrap_or(self.commits.known)),
        }
    }

    /// The newest valid durable table's state (`t`, in `slot`): at risk when it cannot
    /// be proven the newest; after an unclean stop, the writes not flushed since are
    /// said dropped.
    fn take_table(&self, geo: &Geometry, slot: usize, t: &Table, repairs: &mut Vec<String>) -> Choice {
        let at_risk = self.risk_of(geo, slot, t);
        let state = self.hdr.state;
        if state != LiveState::Clean {
            let cause = if state == LiveState::Live && !self.same_boot {
                "not closed cleanly and the machine restarted since (power loss or crash)"
            } else {
                "not closed cleanly (interrupted while opening, or its live table is damaged)"
            };
            repairs.push(format!(
                "{cause}: write pointers taken from the last commit (durable table {}, commit {}); writes not \
                 flushed since are dropped",
                slot_name(slot),
                t.seq
            ));
            if let Ok(old) = &self.live {
                describe_rollback(geo, old, &t.entries, repairs);
            }
        }
        Choice {
            entries: t.entries.clone(),
            durable_seq: self.commits.highest.max(t.seq),
            durable_slot: slot,
            durable_entries: t.entries.clone(),
            at_risk,
            rewrite: false,
            source: format!("commit {}, from durable table {}", t.seq, slot_name(slot)),
        }
    }

    /// What may be lost by taking table `t` (in `slot`): nothing when it is proven as
    /// new as every commit known and no copy contradicts another.
    fn risk_of(&self, geo: &Geometry, slot: usize, t: &Table) -> Option<String> {
        let (hdr, known, unknown_damage) = (&self.hdr, self.commits.known, self.commits.unknown_damage);
        let clean_at = |c: u64| hdr.state == LiveState::Clean && hdr.commit == Some(c);
        let proven =
            t.seq >= known && (!unknown_damage || clean_at(t.seq) || self.same_boot && hdr.commit == Some(t.seq));
        if !self.contra.is_empty() {
            let why = format!(
                "the image's metadata contradicts itself ({}): a part of it was copied back from an older image, \
                 or the disk lost writes it had acknowledged, so the zone state used (commit {}, from durable \
                 table {}) cannot be proven the newest: flushed writes, resets and finishes after it may be undone",
                self.contra.join("; "),
                t.seq,
                slot_name(slot)
            );
            Some(describe_risk(geo, t, why, &self.live))
        } else if !proven {
            Some(describe_risk(geo, t, why_unproven(t, known, unknown_damage), &self.live))
        } else {
            None
        }
    }

    /// What may be lost when parts of another image were found: what they overwrote
    /// (a newer commit, a newer live table) is gone, so the state taken cannot be
    /// proven the newest. Said before what else puts the state at risk, if anything.
    fn other_image_risk(&self, choice: &Choice) -> String {
        let mut s = format!(
            "parts of another image were copied into this one ({}): they are damage, never this image's state, and \
             what they overwrote is lost, so the zone state used ({}) cannot be proven the newest: flushed writes, \
             resets and finishes after it may be undone",
            self.other_image.join("; "),
            choice.source
        );
        match &choice.at_risk {
            Some(risk) => {
                s.push_str("; and ");
                s.push_str(risk);
            }
            None => s.push_str(
                ". Open read-only to copy out what is there, or accept this state with `zblk check --repair -y`",
            ),
        }
        s
    }

    /// Why no state can be taken: neither durable table is usable and the live table
    /// cannot be trusted.
    fn nothing_usable(&self) -> String {
        let why = |s: usize| match &self.tables[s] {
            TableRead::Valid(_) => "valid".to_string(),
            TableRead::Torn { seqs } => format!("torn write (commits {} and {})", seqs.0, seqs.1),
            TableRead::Damaged { why, .. } => why.clone(),
        };
        let live_why = match (&self.live, self.hdr.state) {
            (Err(e), _) => e.clone(),
            (Ok(_), LiveState::Invalid) => "its header is invalid".to_string(),
            (Ok(_), LiveState::Live) if !self.same_boot => "it was live in another boot".to_string(),
            (Ok(_), _) if !self.contra.is_empty() => {
                format!("the copies contradict each other: {}", self.contra.join("; "))
            }
            (Ok(_), _) => format!("it has not seen commit {}", self.commits.known),
        };
        let other = if self.other_image.is_empty() {
            String::new()
        } else {
            format!(
                "; WARNING: parts of another image were copied into this one ({}): they are damage, never this image's \
                 state",
                self.other_image.join("; ")
            )
        };
        format!(
            "both durable zone tables are unusable (A: {}; B: {}) and the live table cannot be trusted \
             ({live_why}){other}",
            why(0),
            why(1)
        )
    }
}

/// The ways the copies contradict each other that no crash, kill or power cut
/// leaves (what each copy bounds: `docs/images.md`, "Witnesses"):
///
/// - no durable table, and no witness (the superblocks, the live table's last
///   bytes), is ahead of the live header: a commit is announced there before its
///   table is written (synced with it), and the witnesses are stored after that
///   sync. After a restart the announcement of the last commit may have been lost
///   with the power (a table one commit ahead); in the same boot the page cache has
///   it, and a clean close had synced it;
/// - after a clean close, the live entries are what the close left: the digest the
///   header stores matches them, and a durable table of the commit it names holds
///   the same entries.
///
/// Any of these broken means some part went back to an older copy (or lost writes the
/// disk acknowledged), and then every part may have, including those that agree.
fn contradictions(
    tables: &[TableRead],
    hdr: &LiveHeader,
    sb_commit: u64,
    live_witness: Option<format::LiveWitness>,
    digest_ok: Option<bool>,
    live: &Result<Vec<Entry>, String>,
    same_boot: bool,
) -> Vec<String> {
    let mut found = Vec::new();
    let Some(c) = hdr.commit else { return found };
    let clean = hdr.state == LiveState::Clean;
    let slack = if clean || same_boot { 0 } else { 1 };
    let state = match hdr.state {
        LiveState::Clean => "clean",
        LiveState::Live => "live",
        LiveState::Invalid => "being rewritten",
    };
    for (slot, t) in tables.iter().enumerate() {
        let seq = match t {
            TableRead::Valid(t) => Some(t.seq),
            TableRead::Damaged { seq, .. } => *seq,
            TableRead::Torn { .. } => None,
        };
        if let Some(seq) = seq.filter(|&s| s > c + slack) {
            found.push(format!(
                "durable zone table {} holds commit {seq}, after commit {c} that the live header ({state}) names",
                slot_name(slot)
            ));
        }
    }
    let completed =
        [("the superblocks", Some(sb_commit)), ("the live table's witness", live_witness.map(|w| w.completed))];
    for (name, w) in completed {
        if let Some(w) = w.filter(|&w| w > c) {
            found.push(format!("{name}: commit {w} completed, after commit {c} that the live header ({state}) names"));
        }
    }
    // The entries' own witness of the commit announced: the header's (or one ahead,
    // a process killed between the two stores) where the page cache or a clean
    // close keeps them together; after a restart either may have lost its last
    // store.
    if let Some(w) = live_witness.filter(|_| clean || same_boot) {
        let ahead = if clean { 0 } else { 1 };
        if !(c..=c + ahead).contains(&w.announced) {
            found.push(format!(
                "the live entries were written under commit {}, the live header ({state}) names commit {c}",
                w.announced
            ));
        }
    }
    if !clean {
        return found;
    }
    let table_c = tables.iter().find_map(|t| match t {
        TableRead::Valid(t) if t.seq == c => Some(t),
        _ => None,
    });
    // Entries that fail their own checks are damage, told as such (the durable table
    // is used): only entries that pass them bear witness.
    let Ok(l) = live else { return found };
    if digest_ok == Some(false) {
        found.push(format!(
            "the live table's entries are not those the clean close of commit {c} left (their digest differs)"
        ));
    } else if table_c.is_some_and(|t| *l != t.entries) {
        found.push(format!(
            "the live table's entries differ from commit {c}'s durable table, which the clean close left them equal to"
        ));
    }
    found
}

/// Why the newest usable table `t` may be older than commit `known`.
fn why_unproven(t: &Table, known: u64, unknown: bool) -> String {
    if t.seq < known {
        format!(
            "the newest usable zone table holds commit {}, but commit {known} happened (its table is damaged or \
             missing): flushed writes, resets and finishes of commits {}..={known} may be undone",
            t.seq,
            t.seq + 1
        )
    } else {
        assert!(unknown, "a state proven as new as every commit is not at risk");
        format!(
            "a durable zone table is damaged beyond telling which commit it held: the newest usable one (commit {}) \
             may be older than the last commit: flushed writes, resets and finishes after it may be undone",
            t.seq
        )
    }
}

/// Says what may be lost when the state taken, the newest usable table `t`, cannot
/// be proven the newest (`why`): that, and the zones whose live entries (if
/// readable, though not trusted) differ from `t`.
fn describe_risk(geo: &Geometry, t: &Table, why: String, live: &Result<Vec<Entry>, String>) -> String {
    let mut s = why;
    match live {
        Ok(l) => {
            let differ: Vec<String> = l
                .iter()
                .zip(&t.entries)
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                .map(|(z, (a, b))| {
                    let start = geo.zone_start(ZoneNo(z as u32)).0;
                    format!(
                        "zone {z} (sectors {:#x}..{:#x}: {} {:#x} in the live table, {} {:#x} in commit {})",
                        start + a.wp_offset.min(b.wp_offset),
                        start + a.wp_offset.max(b.wp_offset),
                        a.cond,
                        start + a.wp_offset,
                        b.cond,
                        start + b.wp_offset,
                        t.seq
                    )
                })
                .collect();
            if differ.is_empty() {
                s.push_str("; the live table (not trusted) agrees with it on every zone");
            } else {
                let n = differ.len();
                s.push_str(&format!(
                    "; zones at risk ({n}): {}{}",
                    differ.into_iter().take(8).collect::<Vec<_>>().join(", "),
                    if n > 8 { ", ..." } else { "" }
                ));
            }
        }
        Err(_) => s.push_str("; which zones cannot be told (the live table is unusable too)"),
    }
    s.push_str(". Open read-only to copy out what is there, or accept the older state with `zblk check --repair -y`");
    s
}

fn describe_rollback(geo: &Geometry, old: &[Entry], new: &[Entry], repairs: &mut Vec<String>) {
    const MAX_LINES: usize = 16;
    let mut n = 0;
    for (z, (o, d)) in old.iter().zip(new).enumerate() {
        if o.wp_offset > d.wp_offset && !geo.zone_is_conv(ZoneNo(z as u32)) {
            n += 1;
            if n <= MAX_LINES {
                let start = geo.zone_start(ZoneNo(z as u32)).0;
                repairs.push(format!(
                    "zone {z} (start {start:#x}): write pointer {:#x} -> {:#x} (unflushed writes dropped)",
                    start + o.wp_offset,
                    start + d.wp_offset
                ));
            }
        }
    }
    if n > MAX_LINES {
        repairs.push(format!("... and {} more zones rolled back", n - MAX_LINES));
    }
}
