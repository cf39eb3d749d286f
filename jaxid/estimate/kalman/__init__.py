"""Kalman filtering, in one place: the generic EKF/UKF/RLS kernels (``filters``), the estimators on
simulated records (``records``) and on measured logs (``logs``).
"""
