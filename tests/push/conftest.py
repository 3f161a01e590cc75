from tests.push.receiver import receivers

__all__ = ["receivers"]
