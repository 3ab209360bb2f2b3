// Eddy's real-client test: drives every XRPC endpoint of a node through
// @atcute/client, the way an atproto app would, and validates every answer
// against Eddy's lexicons with @atproto/lexicon.
//
//   node drive.mjs BASE_URL INPUTS.json   drive a node (e2e/dropin_test.go writes the inputs)
//   node drive.mjs --check-lexicons       only load the lexicons and prove validation bites
//
// It prints one JSON summary on stdout (answers per endpoint, validations
// passed, the records it collected, every failure) and exits 1 on any
// failure. The inputs (all optional but backlinks):
//
//   {
//     "minGeneration": 7,                 // sent on every query
//     "backlinks":  [{"subject": [..], "source": [..], "did": [..], "pageLimit": 2}],
//     "listBacklinks": [{"target": "..", "pageLimit": 2}],
//     "manyToMany": [{"subject": "..", "source": "..", "pathToOther": "..",
//                     "did": [..], "linkDid": [..], "otherSubject": [..], "pageLimit": 2}]
//   }
//
// Each backlinks entry is paged through getBacklinks newest first and
// oldest first, counted by getBacklinksCount and its accounts paged through
// getBacklinkDids; each manyToMany entry goes to getManyToManyCounts (with
// did) and getManyToMany (with linkDid).

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Client, simpleFetchHandler } from '@atcute/client';
import { Lexicons } from '@atproto/lexicon';

const NSID = {
	list: 'blue.cerulea.backlinks.listBacklinks',
	links: 'blue.microcosm.links.getBacklinks',
	count: 'blue.microcosm.links.getBacklinksCount',
	dids: 'blue.microcosm.links.getBacklinkDids',
	m2mCounts: 'blue.microcosm.links.getManyToManyCounts',
	m2m: 'blue.microcosm.links.getManyToMany',
};
const PAGES_MAX = 10000; // a cursor that never ends is a failure, not a hang
const TID = /^[234567abcdefghij][234567abcdefghijklmnopqrstuvwxyz]{12}$/;

const summary = {
	ok: false,
	node: null,
	lexicons: [],
	answers: {},
	validations: { params: 0, outputs: 0, badParamsRejectedByLexicon: 0, mutationsRejected: 0 },
	getBacklinks: [],
	getBacklinksCount: [],
	getBacklinkDids: [],
	listBacklinks: [],
	getManyToManyCounts: [],
	getManyToMany: [],
	badParams: [],
	mutations: [],
	failures: [],
};

function fail(msg) {
	summary.failures.push(msg);
}

// finish prints the summary and exits once stdout has taken all of it
// (a pipe's writes are asynchronous: exiting at once would cut it short).
function finish() {
	summary.ok = summary.failures.length === 0;
	const code = summary.ok ? 0 : 1;
	process.stdout.write(JSON.stringify(summary, null, 1) + '\n', () => process.exit(code));
	return new Promise(() => {}); // nothing runs after it
}

// The lexicons, every file of ../../lexicons.
function loadLexicons() {
	const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../lexicons');
	const lex = new Lexicons();
	for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
		const doc = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
		if (doc.id + '.json' !== f) {
			fail(`lexicon ${f} has id ${doc.id}`);
		}
		lex.add(doc); // throws on a document that is not a valid lexicon
		summary.lexicons.push(doc.id);
	}
	for (const id of Object.values(NSID)) {
		if (!summary.lexicons.includes(id)) {
			fail(`no lexicon for ${id}`);
		}
	}
	return lex;
}

let lex;
let client;

// lexiconRefuses reports whether the lexicons refuse params for nsid.
function lexiconRefuses(nsid, params) {
	try {
		lex.assertValidXrpcParams(nsid, params);
		return false;
	} catch {
		return true;
	}
}

// askAnyway asks nsid with params whatever the lexicon says, counting the
// answer; null (a failure recorded) when the client threw.
async function askAnyway(nsid, params, what) {
	try {
		const res = await client.get(nsid, { params });
		summary.answers[nsid] = (summary.answers[nsid] ?? 0) + 1;
		return res;
	} catch (e) {
		fail(`${what}: ${e.message}`);
		return null;
	}
}

// call asks one endpoint; params must be valid by the lexicon (asserted
// first). It returns the data of a 200 answer and fails otherwise.
async function call(nsid, params, what) {
	try {
		lex.assertValidXrpcParams(nsid, params);
		summary.validations.params++;
	} catch (e) {
		fail(`${what}: params ${JSON.stringify(params)} invalid by the lexicon: ${e.message}`);
		return null;
	}
	let res;
	try {
		res = await client.get(nsid, { params });
	} catch (e) {
		fail(`${what}: ${nsid} ${JSON.stringify(params)}: ${e.message}`);
		return null;
	}
	summary.answers[nsid] = (summary.answers[nsid] ?? 0) + 1;
	if (!res.ok) {
		fail(`${what}: ${nsid} ${JSON.stringify(params)}: HTTP ${res.status} ${JSON.stringify(res.data)}`);
		return null;
	}
	checkHeaders(res, `${what}: ${nsid}`);
	try {
		lex.assertValidXrpcOutput(nsid, res.data);
		summary.validations.outputs++;
	} catch (e) {
		fail(`${what}: ${nsid} answer invalid by the lexicon: ${e.message}: ${JSON.stringify(res.data).slice(0, 500)}`);
		return null;
	}
	if (!('cursor' in res.data) && nsid !== NSID.count) {
		fail(`${what}: ${nsid}: no cursor field`);
	}
	return res.data;
}

function checkHeaders(res, what) {
	const ct = res.headers.get('content-type') ?? '';
	if (!/^application\/json\b/.test(ct)) {
		fail(`${what}: content-type ${ct}`);
	}
	const gen = res.headers.get('x-eddy-generation');
	if (res.ok && (gen === null || !/^\d+$/.test(gen))) {
		fail(`${what}: X-Eddy-Generation ${gen}`);
	}
}

// pages follows cursors to the end; each page passes to onPage.
async function pages(nsid, params, what, onPage) {
	let cursor;
	let n = 0;
	const cursors = [];
	for (;;) {
		const p = { ...params };
		if (cursor !== undefined) {
			p.cursor = cursor;
		}
		const data = await call(nsid, p, `${what} page ${n + 1}`);
		if (data === null) {
			return { pages: n, complete: false, cursors };
		}
		n++;
		onPage(data, n);
		if (data.cursor === null) {
			return { pages: n, complete: true, cursors };
		}
		if (typeof data.cursor !== 'string' || data.cursor === '') {
			fail(`${what}: cursor ${JSON.stringify(data.cursor)}`);
			return { pages: n, complete: false, cursors };
		}
		if (cursors.includes(data.cursor)) {
			fail(`${what}: cursor ${data.cursor} came back`);
			return { pages: n, complete: false, cursors };
		}
		cursors.push(data.cursor);
		cursor = data.cursor;
		if (n >= PAGES_MAX) {
			fail(`${what}: more than ${PAGES_MAX} pages`);
			return { pages: n, complete: false, cursors };
		}
	}
}

const recKey = (r) => `at://${r.did}/${r.collection}/${r.rkey}` + (r.subject !== undefined ? ` ${r.subject}` : '') + (r.source !== undefined ? ` ${r.source}` : '');
const dropDot = (s) => {
	const i = s.indexOf(':');
	return i < 0 ? s : s.slice(0, i + 1) + s.slice(i + 1).replace(/^\./, '');
};

// order checks the contract's order: newest first = descending record
// key, TIDs by time, keys that are not TIDs newer than every TID.
function checkOrder(records, reverse, what) {
	const rank = (k) => (TID.test(k) ? [0, k] : [1, k]);
	for (let i = 1; i < records.length; i++) {
		let [a, b] = [rank(records[i - 1].rkey), rank(records[i].rkey)];
		if (reverse) {
			[a, b] = [b, a];
		}
		// forward: a >= b
		if (a[0] < b[0] || (a[0] === b[0] && a[0] === 0 && a[1] < b[1])) {
			fail(`${what}: ${records[i - 1].rkey} before ${records[i].rkey} (reverse=${reverse})`);
			return;
		}
	}
}

let firstCursor = null; // a real getBacklinks cursor, for the cursor-of-another-query checks
const sample = {}; // a real answer per endpoint, for the mutation checks

async function driveBacklinks(q, i) {
	const what = `backlinks[${i}]`;
	const base = { subject: q.subject, source: q.source };
	if (q.did?.length) {
		base.did = q.did;
	}
	if (summary.minGeneration !== undefined) {
		base.minGeneration = summary.minGeneration;
	}
	const limit = q.pageLimit ?? 100;
	const multi = q.subject.length > 1 || q.source.length > 1;
	const wantSources = new Set(q.source.map(dropDot));
	const out = { index: i, subject: q.subject, source: q.source, did: q.did ?? [], total: null, forward: [], reverse: [], pagesForward: 0, pagesReverse: 0 };
	for (const reverse of [false, true]) {
		const seen = new Set();
		const got = reverse ? out.reverse : out.forward;
		const p = { ...base, limit, reverse };
		const res = await pages(NSID.links, p, `${what} reverse=${reverse}`, (data) => {
			sample[NSID.links] ??= data.records.length ? data : sample[NSID.links];
			if (data.records.length > limit) {
				fail(`${what}: ${data.records.length} records in a page of ${limit}`);
			}
			if (out.total === null) {
				out.total = data.total;
			} else if (data.total !== out.total) {
				fail(`${what}: total ${data.total}, earlier ${out.total}`);
			}
			for (const r of data.records) {
				const k = recKey(r);
				if (seen.has(k)) {
					fail(`${what} reverse=${reverse}: ${k} twice`);
				}
				seen.add(k);
				got.push(r);
				if (multi) {
					if (r.subject === undefined || r.source === undefined) {
						fail(`${what}: a record of a query of several subjects or sources without subject/source: ${JSON.stringify(r)}`);
					} else if (!wantSources.has(r.source) || r.source.slice(r.source.indexOf(':') + 1).startsWith('.')) {
						fail(`${what}: record source ${r.source}, asked ${[...wantSources]}`);
					}
				}
			}
		});
		if (!reverse && res.cursors.length > 0 && firstCursor === null) {
			firstCursor = { params: p, cursor: res.cursors[0] };
		}
		if (reverse) {
			out.pagesReverse = res.pages;
		} else {
			out.pagesForward = res.pages;
		}
		if (res.complete && got.length !== out.total) {
			fail(`${what} reverse=${reverse}: ${got.length} records over ${res.pages} pages, total ${out.total}`);
		}
		checkOrder(got, reverse, `${what}`);
	}
	// Oldest first is newest first backwards (ties of one record linking
	// to several asked subjects or sources may come in either order).
	const fw = out.forward.map(recKey);
	const rv = out.reverse.map(recKey).reverse();
	if (multi ? JSON.stringify([...fw].sort()) !== JSON.stringify([...rv].sort()) : JSON.stringify(fw) !== JSON.stringify(rv)) {
		fail(`${what}: reverse=true is not newest-first backwards:\n fw ${fw}\n rv ${rv}`);
	}
	summary.getBacklinks.push(out);

	const cnt = await call(NSID.count, base, `${what} count`);
	if (cnt !== null) {
		sample[NSID.count] ??= cnt;
		summary.getBacklinksCount.push({ index: i, subject: q.subject, source: q.source, did: q.did ?? [], total: cnt.total });
		if (out.total !== null && cnt.total !== out.total) {
			fail(`${what}: getBacklinksCount ${cnt.total}, getBacklinks total ${out.total}`);
		}
	}

	if (!q.did?.length) {
		const dbase = { subject: q.subject, source: q.source, limit };
		if (base.minGeneration !== undefined) {
			dbase.minGeneration = base.minGeneration;
		}
		const dids = [];
		let total = null;
		const res = await pages(NSID.dids, dbase, `${what} dids`, (data) => {
			sample[NSID.dids] ??= data.linking_dids.length ? data : sample[NSID.dids];
			if (data.linking_dids.length > limit) {
				fail(`${what} dids: ${data.linking_dids.length} in a page of ${limit}`);
			}
			total ??= data.total;
			if (data.total !== total) {
				fail(`${what} dids: total ${data.total}, earlier ${total}`);
			}
			dids.push(...data.linking_dids);
		});
		const want = [...new Set(out.forward.map((r) => r.did))].sort();
		if (new Set(dids).size !== dids.length) {
			fail(`${what} dids: an account twice: ${dids}`);
		}
		if (res.complete && (JSON.stringify([...dids].sort()) !== JSON.stringify(want) || total !== want.length)) {
			fail(`${what} dids: ${dids} (total ${total}), the records' accounts are ${want}`);
		}
		summary.getBacklinkDids.push({ index: i, subject: q.subject, source: q.source, total, dids, pages: res.pages });
	}
}

async function driveList(q, i) {
	const what = `listBacklinks[${i}]`;
	const p = { target: q.target, limit: q.pageLimit ?? 100 };
	if (summary.minGeneration !== undefined) {
		p.minGeneration = summary.minGeneration;
	}
	const merged = {};
	const res = await pages(NSID.list, p, what, (data) => {
		sample[NSID.list] ??= Object.keys(data.backlinks).length ? data : sample[NSID.list];
		let n = 0;
		for (const [k, uris] of Object.entries(data.backlinks)) {
			if (!k.startsWith('$')) {
				fail(`${what}: path ${k}`);
			}
			if (!Array.isArray(uris) || uris.some((u) => typeof u !== 'string' || !u.startsWith('at://'))) {
				fail(`${what}: ${k}: ${JSON.stringify(uris)}`);
				continue;
			}
			merged[k] ??= [];
			for (const u of uris) {
				if (merged[k].includes(u)) {
					fail(`${what}: ${u} twice at ${k}`);
				}
				merged[k].push(u);
				n++;
			}
		}
		if (n > p.limit) {
			fail(`${what}: ${n} links in a page of ${p.limit}`);
		}
	});
	summary.listBacklinks.push({ index: i, target: q.target, backlinks: merged, pages: res.pages });
}

async function driveManyToMany(q, i) {
	const what = `manyToMany[${i}]`;
	const base = { subject: q.subject, source: q.source, pathToOther: q.pathToOther, limit: q.pageLimit ?? 100 };
	if (summary.minGeneration !== undefined) {
		base.minGeneration = summary.minGeneration;
	}
	if (q.otherSubject?.length) {
		base.otherSubject = q.otherSubject;
	}
	const cp = { ...base };
	if (q.did?.length) {
		cp.did = q.did;
	}
	const groups = [];
	const cres = await pages(NSID.m2mCounts, cp, `${what} counts`, (data) => {
		sample[NSID.m2mCounts] ??= data.counts_by_other_subject.length ? data : sample[NSID.m2mCounts];
		if (data.counts_by_other_subject.length > base.limit) {
			fail(`${what} counts: ${data.counts_by_other_subject.length} groups in a page of ${base.limit}`);
		}
		for (const g of data.counts_by_other_subject) {
			if (groups.some((h) => h.subject === g.subject)) {
				fail(`${what} counts: group ${g.subject} twice`);
			}
			if (g.distinct > g.total || g.total < 1) {
				fail(`${what} counts: group ${JSON.stringify(g)}`);
			}
			groups.push(g);
		}
	});
	summary.getManyToManyCounts.push({ index: i, ...q, groups, pages: cres.pages });

	const ip = { ...base };
	if (q.linkDid?.length) {
		ip.linkDid = q.linkDid;
	}
	const items = [];
	const ires = await pages(NSID.m2m, ip, `${what} items`, (data) => {
		sample[NSID.m2m] ??= data.items.length ? data : sample[NSID.m2m];
		if (data.items.length > base.limit) {
			fail(`${what} items: ${data.items.length} in a page of ${base.limit}`);
		}
		for (const it of data.items) {
			const k = recKey(it.linkRecord) + ' ' + it.otherSubject;
			if (items.some((j) => recKey(j.linkRecord) + ' ' + j.otherSubject === k)) {
				fail(`${what} items: ${k} twice`);
			}
			items.push(it);
		}
	});
	summary.getManyToMany.push({ index: i, ...q, items, pages: ires.pages });
}

// Bad parameters: each must be answered 400 InvalidRequest with an XRPC
// body; where the lexicon can express the rule, it must refuse them too.
async function driveBadParams(inputs) {
	const b = inputs.backlinks[0];
	const s = b.subject[0];
	const src = b.source[0];
	const m = inputs.manyToMany?.[0] ?? { subject: s, source: src, pathToOther: 'subject' };
	const m2m = { subject: m.subject, source: m.source, pathToOther: m.pathToOther };
	const cases = [
		[NSID.links, { source: [src] }, true, 'subject missing'],
		[NSID.links, { subject: [s] }, true, 'source missing'],
		[NSID.links, { subject: [s], source: [src], limit: 0 }, true, 'limit 0'],
		[NSID.links, { subject: [s], source: [src], limit: 1001 }, true, 'limit 1001'],
		[NSID.links, { subject: [s], source: [src], limit: 'abc' }, true, 'limit not a number'],
		[NSID.links, { subject: [s], source: [src], limit: [5, 6] }, true, 'limit twice'],
		[NSID.links, { subject: [s], source: [src], reverse: '1' }, true, 'reverse=1'],
		[NSID.links, { subject: [s], source: [src], minGeneration: -1 }, true, 'minGeneration -1'],
		[NSID.links, { subject: [s], source: [src], did: Array.from({ length: 1001 }, (_, i) => `did:plc:eddynobody${i}`) }, true, '1001 dids'],
		[NSID.links, { subject: Array.from({ length: 17 }, (_, i) => `did:plc:${'a'.repeat(23)}${'bcdefghijklmnopqr'[i]}`), source: [src] }, true, '17 subjects'],
		[NSID.links, { subject: [s], source: ['bad'] }, false, 'source without a colon'],
		[NSID.links, { subject: [s], source: [':subject.uri'] }, false, 'source with an empty collection'],
		[NSID.links, { subject: ['not a target'], source: [src] }, false, 'subject not a target'],
		[NSID.links, { subject: [s], source: [src], cursor: 'not-a-cursor!' }, false, 'garbage cursor'],
		[NSID.count, { source: [src] }, true, 'subject missing'],
		[NSID.count, { subject: [s], source: ['bad'] }, false, 'source without a colon'],
		[NSID.dids, { subject: [s], source: [src], limit: 0 }, true, 'limit 0'],
		[NSID.dids, { subject: [s], source: [src], cursor: 'zz' }, false, 'garbage cursor'],
		[NSID.m2mCounts, { subject: m.subject, source: m.source }, true, 'pathToOther missing'],
		[NSID.m2mCounts, { ...m2m, subject: [m.subject, m.subject] }, true, 'subject twice'],
		[NSID.m2mCounts, { ...m2m, limit: 1001 }, true, 'limit 1001'],
		[NSID.m2mCounts, { ...m2m, cursor: '!!' }, false, 'garbage cursor'],
		[NSID.m2m, { subject: m.subject, source: m.source }, true, 'pathToOther missing'],
		[NSID.m2m, { ...m2m, source: 'bad' }, false, 'source without a colon'],
		[NSID.list, {}, true, 'target missing'],
		[NSID.list, { target: s, limit: 1001 }, true, 'limit 1001'],
		[NSID.list, { target: 'not a target' }, false, 'target not a target'],
	];
	if (firstCursor !== null) {
		// A cursor names its query, endpoint and direction.
		const c = firstCursor;
		cases.push([NSID.links, { ...c.params, reverse: !c.params.reverse, cursor: c.cursor }, false, "a cursor of the other direction"]);
		cases.push([NSID.dids, { subject: c.params.subject, source: c.params.source, cursor: c.cursor }, false, 'a getBacklinks cursor on getBacklinkDids']);
		cases.push([NSID.list, { target: c.params.subject[0], cursor: c.cursor }, false, 'a getBacklinks cursor on listBacklinks']);
	} else {
		fail('no getBacklinks query gave a cursor: give one a pageLimit smaller than its links');
	}
	for (const [nsid, params, lexRefuses, why] of cases) {
		const what = `bad params ${nsid} (${why})`;
		const lexThrew = lexiconRefuses(nsid, params);
		if (lexRefuses && !lexThrew) {
			fail(`${what}: the lexicon accepts ${JSON.stringify(params)}`);
		} else if (lexRefuses) {
			summary.validations.badParamsRejectedByLexicon++;
		}
		const res = await askAnyway(nsid, params, what);
		if (!res) {
			continue;
		}
		summary.badParams.push({ nsid, why, params, status: res.status, error: res.data?.error, message: res.data?.message, lexiconRefuses: lexThrew });
		if (res.ok || res.status !== 400 || res.data?.error !== 'InvalidRequest' || typeof res.data?.message !== 'string') {
			fail(`${what}: ok=${res.ok} HTTP ${res.status} ${JSON.stringify(res.data)}, want 400 InvalidRequest`);
		}
		checkHeaders(res, what);
	}
	// A did or linkDid that is not a DID: the lexicon refuses it (format
	// did), the node takes it as Constellation does, an unknown account
	// that matches nothing: an empty answer, not an error.
	const nobody = [
		[NSID.links, { subject: [s], source: [src], did: ['not-a-did'] }, (d) => d.total === 0 && d.records.length === 0 && d.cursor === null],
		[NSID.count, { subject: [s], source: [src], did: ['not-a-did'] }, (d) => d.total === 0],
		[NSID.m2mCounts, { ...m2m, did: ['nope'] }, (d) => d.counts_by_other_subject.length === 0],
		[NSID.m2m, { ...m2m, linkDid: ['nope'] }, (d) => d.items.length === 0],
	];
	for (const [nsid, params, empty] of nobody) {
		const what = `a value that is not a DID, ${nsid} ${JSON.stringify(params)}`;
		if (!lexiconRefuses(nsid, params)) {
			fail(`${what}: the lexicon accepts it`);
		}
		const res = await askAnyway(nsid, params, what);
		if (!res) {
			continue;
		}
		if (!res.ok || !empty(res.data)) {
			fail(`${what}: HTTP ${res.status} ${JSON.stringify(res.data)}, want an empty answer`);
			continue;
		}
		checkHeaders(res, what);
	}
}

// Validation must be able to fail: a real answer of each endpoint with one
// field renamed (at the top and, where the answer has one, inside an
// entry), the cursor dropped, or a count turned into a string, must be
// refused by assertValidXrpcOutput.
function driveMutations() {
	const rename = (o, from, to) => {
		const c = structuredClone(o);
		c[to] = c[from];
		delete c[from];
		return c;
	};
	const muts = {
		[NSID.list]: [
			['backlinks -> backlinkz', (d) => rename(d, 'backlinks', 'backlinkz')],
			['backlinks a string', (d) => ({ ...d, backlinks: 'none' })],
			['cursor dropped', (d) => rename(d, 'cursor', 'next')],
		],
		[NSID.links]: [
			['records -> recordz', (d) => rename(d, 'records', 'recordz')],
			['total -> count', (d) => rename(d, 'total', 'count')],
			['records[0].did -> records[0].DID', (d) => ({ ...d, records: [rename(d.records[0], 'did', 'DID'), ...d.records.slice(1)] })],
			['records[0].did not a DID', (d) => ({ ...d, records: [{ ...d.records[0], did: 'someone' }, ...d.records.slice(1)] })],
			['cursor dropped', (d) => rename(d, 'cursor', 'next')],
		],
		[NSID.count]: [
			['total -> count', (d) => rename(d, 'total', 'count')],
			['total a string', (d) => ({ ...d, total: String(d.total) })],
		],
		[NSID.dids]: [
			['linking_dids -> linkingDids', (d) => rename(d, 'linking_dids', 'linkingDids')],
			['linking_dids[0] not a DID', (d) => ({ ...d, linking_dids: ['someone', ...d.linking_dids.slice(1)] })],
			['cursor dropped', (d) => rename(d, 'cursor', 'next')],
		],
		[NSID.m2mCounts]: [
			['counts_by_other_subject -> countsByOtherSubject', (d) => rename(d, 'counts_by_other_subject', 'countsByOtherSubject')],
			['counts_by_other_subject[0].distinct -> distinct_dids', (d) => ({ ...d, counts_by_other_subject: [rename(d.counts_by_other_subject[0], 'distinct', 'distinct_dids'), ...d.counts_by_other_subject.slice(1)] })],
			['cursor dropped', (d) => rename(d, 'cursor', 'next')],
		],
		[NSID.m2m]: [
			['items -> records', (d) => rename(d, 'items', 'records')],
			['items[0].linkRecord -> link_record', (d) => ({ ...d, items: [rename(d.items[0], 'linkRecord', 'link_record'), ...d.items.slice(1)] })],
			['items[0].otherSubject -> other_subject', (d) => ({ ...d, items: [rename(d.items[0], 'otherSubject', 'other_subject'), ...d.items.slice(1)] })],
			['cursor dropped', (d) => rename(d, 'cursor', 'next')],
		],
	};
	for (const [nsid, list] of Object.entries(muts)) {
		const real = sample[nsid];
		if (real === undefined) {
			fail(`mutations: no real non-empty answer of ${nsid} to mutate`);
			continue;
		}
		try {
			lex.assertValidXrpcOutput(nsid, real);
		} catch (e) {
			fail(`mutations: the real answer of ${nsid} is itself invalid: ${e.message}`);
			continue;
		}
		for (const [change, f] of list) {
			const bad = f(real);
			let threw = null;
			try {
				lex.assertValidXrpcOutput(nsid, bad);
			} catch (e) {
				threw = e.message;
			}
			summary.mutations.push({ nsid, change, rejected: threw !== null, message: threw });
			if (threw === null) {
				fail(`mutations: ${nsid} with ${change} passes assertValidXrpcOutput: ${JSON.stringify(bad).slice(0, 300)}`);
			} else {
				summary.validations.mutationsRejected++;
			}
		}
	}
}

// Without a node: synthetic answers shaped as the contract says, valid,
// and the same mutations refused.
function syntheticSamples() {
	const rec = { did: 'did:plc:ewvi7nxzyoun6zhxrhs64oiz', collection: 'app.bsky.feed.like', rkey: '3mptbyplj5d2a' };
	sample[NSID.list] = { backlinks: { '$.subject': ['at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.like/3mptbyplj5d2a'] }, cursor: null };
	sample[NSID.links] = { total: 2, records: [rec, { ...rec, rkey: '3mptbyplj5d2b', subject: 'did:plc:ewvi7nxzyoun6zhxrhs64oiz', source: 'app.bsky.feed.like:subject.uri' }], cursor: 'abc' };
	sample[NSID.count] = { total: 2 };
	sample[NSID.dids] = { total: 1, linking_dids: [rec.did], cursor: null };
	sample[NSID.m2mCounts] = { counts_by_other_subject: [{ subject: 'did:plc:ewvi7nxzyoun6zhxrhs64oiz', total: 2, distinct: 1 }], cursor: null };
	sample[NSID.m2m] = { items: [{ linkRecord: { ...rec, collection: 'app.bsky.graph.listitem' }, otherSubject: 'did:plc:ewvi7nxzyoun6zhxrhs64oiz' }], cursor: 'x' };
}

async function main() {
	const args = process.argv.slice(2);
	try {
		lex = loadLexicons();
	} catch (e) {
		fail(`loading the lexicons: ${e.message}`);
		return finish();
	}
	if (args[0] === '--check-lexicons') {
		syntheticSamples();
		driveMutations();
		return finish();
	}
	if (args.length !== 2) {
		process.stderr.write('usage: node drive.mjs BASE_URL INPUTS.json | --check-lexicons\n');
		process.exit(2);
	}
	const [service, file] = args;
	summary.node = service;
	const inputs = JSON.parse(fs.readFileSync(file, 'utf8'));
	if (inputs.minGeneration !== undefined) {
		summary.minGeneration = inputs.minGeneration;
	}
	const timedFetch = (url, init) => fetch(url, { ...init, signal: AbortSignal.timeout(30000) });
	client = new Client({ handler: simpleFetchHandler({ service, fetch: timedFetch }) });
	if (!inputs.backlinks?.length) {
		fail('inputs: no backlinks queries');
		return finish();
	}
	for (const [i, q] of inputs.backlinks.entries()) {
		await driveBacklinks(q, i);
	}
	for (const [i, q] of (inputs.listBacklinks ?? []).entries()) {
		await driveList(q, i);
	}
	for (const [i, q] of (inputs.manyToMany ?? []).entries()) {
		await driveManyToMany(q, i);
	}
	await driveBadParams(inputs);
	driveMutations();
	return finish();
}

main().catch((e) => {
	fail(`uncaught: ${e.stack ?? e}`);
	finish();
});
