"""All I/O in one place: the transports that execute the logic's requests.

`local` (a folder), `memory`, `s3` (boto3/aiobotocore through `aws`), `sqlite` and
`dynamodb` (the index), `threaded` (a blocking transport behind the asyncio API) and
`router` (object requests to storage, index requests to the index). Nothing outside
`stash` (which wires a stash together) and the CLI imports this package; the logic only
speaks the request vocabularies of `stores.objects` and `index.requests`.
"""
