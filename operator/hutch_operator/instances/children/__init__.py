"""Broker CR → child objects, one builder per file, applied in the order of ``ORDER``.

Secret and ConfigMap come first and the StatefulSet last, so the pod never starts before its
credentials and config exist; Services before the StatefulSet because its ``serviceName`` must
name an existing headless Service for stable DNS from the first start.
"""
