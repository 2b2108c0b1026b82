"""Webhooks: job and batch events POSTed to receivers per the Standard Webhooks convention.

Here: `sending.py` (signing, derived secrets, one POST and how it went, the retry schedule, the
test event) and `transport.py` (the POST itself, pinned to the address the SSRF guard approved).
The rest sits in the layer it belongs to, each named for webhooks, so that the layers stay
one-way (`pyproject.toml`, `[tool.importlinter]`): `services/deliveries.py` (deliveries fanned out
with their event, recorded, retried) and `services/subscriptions.py` (subscriptions' writes),
`engine/delivery_lane.py` (the lane that sends them), `api/webhook_endpoints.py` and
`api/webhook_serializers.py` (clients' own endpoints), `admin/webhooks.py` (staff's pages).
"""
