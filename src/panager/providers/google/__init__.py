"""Google: Calendar, Tasks and Gmail over OAuth, behind the provider contract."""
