"""The maintenance wing: what keeps a stash tidy and erases what must go.

Purge (`purge`: tombstones, sweeps of every version, receipts), what it selects
(`selection`), the lives rule (`lives`), its receipts (`receipts`) and their seal
(`receipt_seal`), blob garbage collection (`garbage`) and the storage/index diagnosis
(`doctor`). `Stash`'s maintenance methods call into it; nothing below `stash` imports it.
"""
